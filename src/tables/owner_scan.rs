//! The largest value of a table's `bigint` column, read with the table owner's rights, the way
//! VACUUM and REINDEX run a table's code: `snowflake_adopt` and `snowflake_restore_mark(tables)`
//! need it, and are run by superusers on tables other roles own.
//!
//! Planning even `SELECT max(id) FROM t` can run code the table's owner wrote (an immutable
//! function in a partial index's predicate is evaluated when the planner loads it). Run as the
//! caller, a superuser, that code would have the superuser's rights. So the scan runs as the
//! owner, in a security-restricted operation (the owner's code can neither change roles nor
//! leave anything behind), with `search_path` set to `pg_catalog, pg_temp` and
//! `row_security = off` (if a policy would hide rows from the owner, the scan fails rather than
//! return a maximum that misses them).

use crate::errors;
use pgrx::prelude::*;
use std::ffi::CString;

/// What a relation is, as the scan needs it.
struct Table {
    qualified: String,
    owner: pg_sys::Oid,
}

fn table(oid: pg_sys::Oid) -> Table {
    let found = Spi::get_two_with_args::<String, pg_sys::Oid>(
        "SELECT pg_catalog.format('%I.%I', n.nspname, c.relname), c.relowner
         FROM pg_catalog.pg_class c
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
         WHERE c.oid OPERATOR(pg_catalog.=) $1
           AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,m}'::pg_catalog.\"char\"[])",
        &[oid.into()],
    );
    match found {
        Ok((Some(qualified), Some(owner))) => Table { qualified, owner },
        _ => errors::not_a_table(oid.to_u32()),
    }
}

/// Whether the current user is the owner of `owner`'s objects (a member of the role) or a
/// superuser.
pub fn may_act_as(owner: pg_sys::Oid) -> bool {
    Spi::get_one_with_args::<bool>(
        "SELECT pg_catalog.pg_has_role($1, 'USAGE')",
        &[owner.into()],
    )
    .ok()
    .flatten()
    .unwrap_or(false)
}

/// The largest value of `column` in `table` (below `below`, if given), read as the table's
/// owner. The caller must own the table or be a superuser.
pub fn largest(table_oid: pg_sys::Oid, column: &str, below: Option<i64>) -> Option<i64> {
    let table = table(table_oid);
    if !may_act_as(table.owner) {
        errors::not_table_owner(&table.qualified);
    }
    let column = pgrx::spi::quote_identifier(column);
    let query = match below {
        None => format!("SELECT pg_catalog.max({column}) FROM {}", table.qualified),
        Some(below) => format!(
            "SELECT pg_catalog.max({column}) FROM {} WHERE {column} OPERATOR(pg_catalog.<) {below}::pg_catalog.int8",
            table.qualified
        ),
    };
    let mut saved_user = pg_sys::InvalidOid;
    let mut saved_context = 0;
    // SAFETY: the same calls VACUUM makes around a table's code: switch to the owner in a
    // security-restricted operation and open a GUC nest level; both are undone below, and by
    // the transaction's abort if the query raises an error.
    let nest = unsafe {
        pg_sys::GetUserIdAndSecContext(&mut saved_user, &mut saved_context);
        pg_sys::SetUserIdAndSecContext(
            table.owner,
            saved_context
                | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
        );
        let nest = pg_sys::NewGUCNestLevel();
        set_local("search_path", "pg_catalog, pg_temp");
        set_local("row_security", "off");
        nest
    };
    let largest = Spi::get_one::<i64>(&query);
    // SAFETY: restores what was saved above.
    unsafe {
        pg_sys::AtEOXact_GUC(true, nest);
        pg_sys::SetUserIdAndSecContext(saved_user, saved_context);
    }
    largest.unwrap_or_else(|e| errors::largest_not_bigint(&column, &table.qualified, &e))
}

/// The relation's name, schema-qualified and quoted, for messages.
pub fn name_of(oid: pg_sys::Oid) -> String {
    table(oid).qualified
}

/// SAFETY: only inside a GUC nest level opened by the caller, which undoes it.
unsafe fn set_local(name: &str, value: &str) {
    let (name, value) = (CString::new(name).unwrap(), CString::new(value).unwrap());
    // SAFETY: as the caller guarantees; both strings live across the call.
    unsafe {
        pg_sys::set_config_option(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
    }
}

/// `snowflake_adopt`'s scan for the current maximum: the largest value of `col` in `tbl`, read
/// with the owner's rights. Only the table's owner (or a superuser) may call it.
#[pg_extern(volatile, strict, parallel_unsafe, sql = false)]
fn snowflake_column_max(tbl: pg_sys::Oid, col: &str) -> Option<i64> {
    largest(tbl, col, None)
}

// The declaration, with a regclass argument: sql/install/column_max.sql.
pgrx::extension_sql_file!(
    "../../sql/install/column_max.sql",
    name = "snowflake_column_max_declaration"
);
