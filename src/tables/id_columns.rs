//! Which columns of a table hold snowflake ids: the one definition that
//! `snowflake_restore_mark(tables)` and `snowflake_guard` use (and users can call,
//! `snowflake_id_columns(tbl)`).
//!
//! * every column whose default calls `snowflake_nextval` (found through `pg_depend`, so
//!   however the call is written or qualified), whatever its type; it is *readable* when its
//!   values are ids: `bigint` or this extension's `snowflake`. A column whose default makes
//!   ids but whose type cannot hold them (text, numeric) is listed as not readable, so callers
//!   refuse rather than guess;
//! * only when there is none: the table's one-column primary key of type `bigint` or
//!   `snowflake` that has no default and is no identity, the key of an application that
//!   inserts ids it took itself (from `snowflake_nextval_batch`, say). A key with another
//!   default (a sequence, an identity) holds no snowflake ids.

use pgrx::prelude::*;

const ID_COLUMNS: &str = "
WITH ext AS (SELECT e.oid FROM pg_catalog.pg_extension e
             WHERE e.extname OPERATOR(pg_catalog.=) 'snowflake_ext'),
cols AS (
  SELECT a.attnum, a.attname, a.atttypid, a.atttypmod, a.attidentity, a.attgenerated,
         d.oid AS attrdef,
         EXISTS (SELECT FROM pg_catalog.pg_depend dep
                   JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) dep.refobjid
                  WHERE dep.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_attrdef'::pg_catalog.regclass
                    AND dep.objid OPERATOR(pg_catalog.=) d.oid
                    AND dep.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                    AND p.proname OPERATOR(pg_catalog.=) 'snowflake_nextval') AS makes_ids,
         (a.atttypid OPERATOR(pg_catalog.=) 'pg_catalog.int8'::pg_catalog.regtype
          OR EXISTS (SELECT FROM pg_catalog.pg_type t
                       JOIN pg_catalog.pg_depend dep ON dep.objid OPERATOR(pg_catalog.=) t.oid
                      WHERE t.oid OPERATOR(pg_catalog.=) a.atttypid
                        AND t.typname OPERATOR(pg_catalog.=) 'snowflake'
                        AND dep.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
                        AND dep.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
                        AND dep.deptype OPERATOR(pg_catalog.=) 'e'
                        AND dep.refobjid OPERATOR(pg_catalog.=) ANY (SELECT oid FROM ext))) AS readable
    FROM pg_catalog.pg_attribute a
    LEFT JOIN pg_catalog.pg_attrdef d
      ON d.adrelid OPERATOR(pg_catalog.=) a.attrelid AND d.adnum OPERATOR(pg_catalog.=) a.attnum
   WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attnum OPERATOR(pg_catalog.>) 0
     AND NOT a.attisdropped)
SELECT c.attname::pg_catalog.text, pg_catalog.format_type(c.atttypid, c.atttypmod), c.readable
  FROM cols c
 WHERE c.makes_ids
    OR (NOT EXISTS (SELECT FROM cols WHERE cols.makes_ids)
        AND c.readable AND c.attrdef IS NULL AND c.attidentity OPERATOR(pg_catalog.=) ''
        AND c.attgenerated OPERATOR(pg_catalog.=) ''
        AND EXISTS (SELECT FROM pg_catalog.pg_index i
                     WHERE i.indrelid OPERATOR(pg_catalog.=) $1 AND i.indisprimary
                       AND i.indnkeyatts OPERATOR(pg_catalog.=) 1
                       AND i.indkey[0] OPERATOR(pg_catalog.=) c.attnum))
 ORDER BY c.attnum";

/// A column that holds snowflake ids.
pub struct IdColumn {
    pub name: String,
    /// Its type, as `format_type` writes it.
    pub type_name: String,
    /// Whether its values can be read as ids (`bigint` or `snowflake`).
    pub readable: bool,
}

/// The id columns of the relation `table`, in column order (none for a relation that does not
/// exist).
pub fn of(table: pg_sys::Oid) -> Vec<IdColumn> {
    Spi::connect(|client| {
        client
            .select(ID_COLUMNS, None, &[table.into()])
            .map(|rows| {
                rows.filter_map(|r| {
                    Some(IdColumn {
                        name: r.get::<String>(1).ok()??,
                        type_name: r.get::<String>(2).ok()??,
                        readable: r.get::<bool>(3).ok()??,
                    })
                })
                .collect()
            })
            .unwrap_or_default()
    })
}

/// The columns of `tbl` that hold snowflake ids (see the module's comment): each with its type
/// and whether its values can be read as ids.
#[pg_extern(stable, strict, parallel_safe, sql = false)]
fn snowflake_id_columns(
    tbl: pg_sys::Oid,
) -> TableIterator<
    'static,
    (
        name!(col, String),
        name!(type, String),
        name!(readable, bool),
    ),
> {
    TableIterator::new(
        of(tbl)
            .into_iter()
            .map(|c| (c.name, c.type_name, c.readable)),
    )
}

// Declared in sql/install/id_columns.sql: pgrx would make the argument an oid.
pgrx::extension_sql_file!(
    "../../sql/install/id_columns.sql",
    name = "snowflake_id_columns_declaration"
);
