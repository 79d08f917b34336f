pub mod admin;
pub mod mailbox;
pub mod marks_table;
pub mod token_file;
pub mod writer;
