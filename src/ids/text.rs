//! Ids as text for JavaScript and JSON: `snowflake_to_text` / `snowflake_from_text` (decimal,
//! Crockford base32, base62; `snowflake_core::text`), and the `snowflake` type, a bigint whose
//! JSON form is a string.
//!
//! The type is to `bigint` what `varchar` is to `text`: the same 8 bytes, passed by value,
//! binary-coercible both ways with implicit casts, and with no operators of its own; it is in
//! the numeric category, and integers and smallints cast to it implicitly as they do to
//! bigint, so `JOIN ... USING`, `UNION` and `CASE` find it a common type with them. So every
//! comparison, every index (`CREATE INDEX`, a primary key, a hash index) and every aggregate
//! uses bigint's, exactly as fast, and a `snowflake` column compares with bigints and integers
//! and uses its index for it. What differs is what a value of it becomes in JSON: `to_json`,
//! `row_to_json` and `json_agg` write a type that is not one of PostgreSQL's numbers as a
//! string, so `{"id": "250163766832934912"}` reaches JavaScript intact. Its text form is the
//! decimal id (so JSON strings parse back), its binary form bigint's.

use crate::errors;
use pgrx::prelude::*;
use snowflake_core::text::{self, BadText, Form};
use std::ffi::CStr;

fn form_of(name: &str) -> Form {
    Form::parse(name).unwrap_or_else(|| errors::unknown_text_form(name, Form::NAMES))
}

fn bad_text(input: &str, form: Form, why: BadText) -> ! {
    let (example, width) = match form {
        Form::Decimal => ("250163766832934912", "up to 19 digits".to_string()),
        Form::Base32 => (
            "06Y62KVCW0C00",
            format!(
                "exactly {} Crockford base32 digits (single hyphens may separate them)",
                text::BASE32_WIDTH
            ),
        ),
        Form::Base62 => (
            "0ITkfOwqJlI",
            format!("exactly {} base62 digits", text::BASE62_WIDTH),
        ),
    };
    errors::invalid_id_text(form.name(), &shortened(input), &why, &width, example)
}

/// At most `SHOWN` characters of a text, for a message.
fn shortened(input: &str) -> String {
    const SHOWN: usize = 40;
    match input.char_indices().nth(SHOWN) {
        Some((end, _)) => format!(
            "{}... ({} characters)",
            &input[..end],
            input.chars().count()
        ),
        None => input.to_string(),
    }
}

/// The id as text: `decimal`, `base32` (Crockford, 13 characters, case-insensitive when read)
/// or `base62` (11 characters). The padded forms sort like the ids.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_to_text(id: i64, form: default!(&str, "'base32'")) -> String {
    if id < 0 {
        errors::layout_error(
            snowflake_core::layout::LayoutError::NegativeId(id),
            crate::settings::layout(),
        );
    }
    text::encode(id, form_of(form))
}

/// The id a text of `snowflake_to_text` stands for.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_from_text(input: &str, form: default!(&str, "'base32'")) -> i64 {
    let form = form_of(form);
    text::decode(input, form).unwrap_or_else(|why| bad_text(input, form, why))
}

/// The `snowflake` type's input function: a decimal id. A negative bigint is read too, as
/// `int8in` would: the implicit casts from the integer types let the type hold one, and what
/// `snowflake_out` prints must read back (COPY, pg_dump); decoding it is still an error.
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn snowflake_in(input: &CStr) -> i64 {
    let input = input.to_string_lossy();
    let read = match text::decode(&input, Form::Decimal) {
        Err(BadText::Negative) => input.trim().parse::<i64>().map_err(|_| BadText::Negative),
        read => read,
    };
    read.unwrap_or_else(|why| errors::invalid_snowflake_input(&input, &why))
}

// The snowflake type (shell, I/O functions, the type, its casts): sql/install/type.sql.
pgrx::extension_sql_file!(
    "../../sql/install/type.sql",
    name = "snowflake_type",
    requires = [snowflake_in, snowflake_timestamp]
);
