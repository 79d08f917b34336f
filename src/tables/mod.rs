//! Snowflake ids in users' tables: moving a key column onto them ([`adopt`]), the replication
//! guard ([`guard`]), which columns hold ids ([`id_columns`]), reading a column's largest value
//! with its owner's rights ([`owner_scan`]), who may call what ([`privileges`]), and the Citus
//! check that keeps the nodes of one cluster from sharing a worker id ([`citus`]).

pub mod adopt;
pub mod citus;
pub mod guard;
pub mod id_columns;
pub mod owner_scan;
pub mod privileges;
