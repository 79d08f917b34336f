pub mod adopt;
pub mod citus;
pub mod guard;
pub mod id_columns;
pub mod owner_scan;
pub mod privileges;
