pub mod decode;
pub mod text;
pub mod time_filter;
