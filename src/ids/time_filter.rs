//! Time filters that use the primary key: `WHERE snowflake_timestamp(id) >= $1` (and `>`, `<`,
//! `<=`, `=`, `BETWEEN`) answered by a range scan of the index on `id`, without rewriting the
//! query; and the bounds of a range partition by time.
//!
//! A planner support function cannot do it: PostgreSQL asks the support function of the
//! comparison operator's own function, and only when one of its arguments is the index column,
//! while here the column sits inside `snowflake_timestamp()`. So a planner hook adds, before
//! planning, the condition each such comparison implies on the id itself, beside it:
//!
//! ```text
//! snowflake_timestamp(id) >= T   adds   id >= snowflake_lower_bound(T)
//! snowflake_timestamp(id) <= T   adds   id <= snowflake_upper_bound(T)   (< likewise)
//! snowflake_timestamp(id)  = T   adds   both
//! ```
//!
//! In a worker-first layout (`order=worker-time-sequence`, Seata's) nothing is added: there the
//! ids of a time range are one key range per worker, and one bound on the id would cut nothing.
//!
//! The added condition is implied by the original, which stays, so results never change; the
//! planner can now use the index for it. A condition the query already has is not added again
//! (a Citus shard query arrives with the coordinator's). Only comparisons that are top-level conjuncts of a
//! WHERE or JOIN ... ON clause are looked at (in the query, its subqueries in FROM and its
//! CTEs), with a right-hand side that is not volatile. The bounds are IMMUTABLE and clamp times
//! outside the layout, so a condition never raises an error the query would not.

use crate::{errors, ids::decode, settings};
use pgrx::pg_sys::{self, Node, NodeTag};
use pgrx::prelude::*;
use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr;

/// The built-in btree operator family `datetime_ops` (date, timestamp and timestamptz,
/// cross-type operators included): OID 434 in `pg_opfamily.dat` of every major, which pgrx
/// does not name.
const DATETIME_BTREE_FAM_OID: pg_sys::Oid = pg_sys::Oid::from_u32(434);

/// The smallest id any worker can have at or after `ts` (0 before the layout's epoch): every id
/// whose `snowflake_timestamp` is at least `ts` is at least this.
#[pg_extern(immutable, strict, parallel_safe)]
pub fn snowflake_lower_bound(ts: TimestampWithTimeZone) -> i64 {
    let layout = settings::layout();
    match layout.time_from_pg_micros(ts.into()) {
        Ok(time) => layout.min_id(time),
        Err(snowflake_core::layout::LayoutError::BeforeEpoch(_)) => 0,
        Err(_) => i64::MAX,
    }
}

/// The largest id any worker can have at or before `ts` (-1 before the epoch): every id whose
/// `snowflake_timestamp` is at most `ts` is at most this.
#[pg_extern(immutable, strict, parallel_safe)]
pub fn snowflake_upper_bound(ts: TimestampWithTimeZone) -> i64 {
    let layout = settings::layout();
    match layout.time_from_pg_micros(ts.into()) {
        Ok(time) => layout.max_id(time),
        Err(snowflake_core::layout::LayoutError::BeforeEpoch(_)) => -1,
        Err(_) => i64::MAX,
    }
}

/// The bounds of a range partition holding the ids made from `from_ts` (inclusive) to `to_ts`
/// (exclusive), for `PARTITION BY RANGE (id)`: `FOR VALUES FROM (from_id) TO (to_id)`. Refused
/// in a worker-first layout, where a time range is one key range per worker.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_partition_bounds(
    from_ts: TimestampWithTimeZone,
    to_ts: TimestampWithTimeZone,
) -> TableIterator<'static, (name!(from_id, i64), name!(to_id, i64))> {
    let layout = settings::layout();
    if !layout.is_time_first() {
        errors::not_time_first("snowflake_partition_bounds", layout);
    }
    let (from, to) = (
        decode::time_of(from_ts, layout),
        decode::time_of(to_ts, layout),
    );
    if to <= from {
        errors::empty_partition(&from_ts, &to_ts);
    }
    TableIterator::once((layout.min_id(from), layout.min_id(to)))
}

static mut PREV_PLANNER_HOOK: pg_sys::planner_hook_type = None;

/// Installs the planner hook; called from `_PG_init` in every process that loads the library.
pub fn install() {
    // SAFETY: _PG_init runs once per process, before any planning; we chain to the previous
    // hook.
    unsafe {
        PREV_PLANNER_HOOK = pg_sys::planner_hook;
        pg_sys::planner_hook = Some(plan);
    }
}

// SAFETY: the declaration matches `standard_planner` of optimizer/planner.h in every supported
// major (the signature of `planner_hook_type`, which `plan` below implements).
unsafe extern "C-unwind" {
    /// PostgreSQL's planner, called as it is: pgrx's `pg_sys::standard_planner` would catch every
    /// planning error (a division by zero folded as a constant, any function's error) and raise
    /// it again with a Rust backtrace in its DETAIL.
    #[link_name = "standard_planner"]
    fn standard_planner_as_is(
        parse: *mut pg_sys::Query,
        query_string: *const c_char,
        cursor_options: c_int,
        bound_params: pg_sys::ParamListInfo,
    ) -> *mut pg_sys::PlannedStmt;
}

/// The planner hook. Not `#[pg_guard]`: the planning it hands on may raise an ERROR, which
/// must reach PostgreSQL untouched; it longjmps through this frame, which owns nothing to drop.
/// Our own work is in `add_bounds`, which is guarded.
///
/// SAFETY: PostgreSQL calls it as its planner hook, with the arguments of planner().
unsafe extern "C-unwind" fn plan(
    parse: *mut pg_sys::Query,
    query_string: *const c_char,
    cursor_options: c_int,
    bound_params: pg_sys::ParamListInfo,
) -> *mut pg_sys::PlannedStmt {
    // SAFETY: `parse` is the query being planned, ours to add conditions to before planning;
    // the rest is the planner called with its own arguments.
    unsafe {
        add_bounds(parse);
        match PREV_PLANNER_HOOK {
            Some(prev) => prev(parse, query_string, cursor_options, bound_params),
            None => standard_planner_as_is(parse, query_string, cursor_options, bound_params),
        }
    }
}

/// SAFETY: `parse` is a valid query tree about to be planned.
#[pg_guard]
unsafe extern "C-unwind" fn add_bounds(parse: *mut pg_sys::Query) {
    // SAFETY: as the caller guarantees.
    unsafe { add_implied_bounds(parse) }
}

/// SAFETY: `node` is null or a valid node.
unsafe fn is_a(node: *const Node, tag: NodeTag) -> bool {
    // SAFETY: as the caller guarantees.
    !node.is_null() && unsafe { (*node).type_ } == tag
}

/// The elements of a PostgreSQL list of pointers.
/// SAFETY: `list` is null (empty) or a valid pointer list.
unsafe fn elements(list: *mut pg_sys::List) -> Vec<*mut Node> {
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: a pointer list holds `length` cells.
    unsafe {
        (0..(*list).length as usize)
            .map(|i| (*(*list).elements.add(i)).ptr_value.cast::<Node>())
            .collect()
    }
}

/// SAFETY: `query` is a valid query tree.
unsafe fn add_implied_bounds(query: *mut pg_sys::Query) {
    // SAFETY: every pointer followed is one of the query tree's own.
    unsafe {
        if !(*query).jointree.is_null() {
            add_to_from((*query).jointree);
        }
        for rte in elements((*query).rtable) {
            let rte = rte.cast::<pg_sys::RangeTblEntry>();
            if (*rte).rtekind == pg_sys::RTEKind::RTE_SUBQUERY && !(*rte).subquery.is_null() {
                add_implied_bounds((*rte).subquery);
            }
        }
        for cte in elements((*query).cteList) {
            let query = (*cte.cast::<pg_sys::CommonTableExpr>()).ctequery;
            if is_a(query, NodeTag::T_Query) {
                add_implied_bounds(query.cast());
            }
        }
    }
}

/// SAFETY: `from` is a valid FromExpr.
unsafe fn add_to_from(from: *mut pg_sys::FromExpr) {
    // SAFETY: the FromExpr's own pointers.
    unsafe {
        (*from).quals = add_to_qual((*from).quals);
        for item in elements((*from).fromlist) {
            add_to_join_item(item);
        }
    }
}

/// SAFETY: `item` is a valid join tree node.
unsafe fn add_to_join_item(item: *mut Node) {
    // SAFETY: the join tree's own pointers, checked by tag.
    unsafe {
        if is_a(item, NodeTag::T_JoinExpr) {
            let join = item.cast::<pg_sys::JoinExpr>();
            (*join).quals = add_to_qual((*join).quals);
            add_to_join_item((*join).larg);
            add_to_join_item((*join).rarg);
        } else if is_a(item, NodeTag::T_FromExpr) {
            add_to_from(item.cast());
        }
    }
}

/// The qual with the implied bounds of its conjuncts added to it.
/// SAFETY: `qual` is null or a valid expression.
unsafe fn add_to_qual(qual: *mut Node) -> *mut Node {
    if qual.is_null() {
        return qual;
    }
    // SAFETY: the expression's own pointers, checked by tag.
    unsafe {
        let and = is_a(qual, NodeTag::T_BoolExpr)
            && (*qual.cast::<pg_sys::BoolExpr>()).boolop == pg_sys::BoolExprType::AND_EXPR;
        // A bound already there is not added again: Citus sends a shard the query with the
        // coordinator's bounds in it (as written, or folded to a constant), and the worker's
        // planner would add each a second time.
        let present = conjuncts(qual);
        let there = |e: *mut Node| {
            present
                .iter()
                .any(|&c| pg_sys::equal(c.cast_const().cast(), e.cast_const().cast()))
        };
        let extra: Vec<*mut Node> = present
            .iter()
            .flat_map(|&c| implied(c))
            .filter(|bound| !there(bound.clause) && !bound.folded.is_some_and(there))
            .map(|bound| bound.clause)
            .collect();
        if extra.is_empty() {
            return qual;
        }
        let mut args = if and {
            (*qual.cast::<pg_sys::BoolExpr>()).args
        } else {
            pg_sys::list_make1_impl(
                NodeTag::T_List,
                pg_sys::ListCell {
                    ptr_value: qual.cast(),
                },
            )
        };
        for e in extra {
            args = pg_sys::lappend(args, e.cast());
        }
        if and {
            (*qual.cast::<pg_sys::BoolExpr>()).args = args;
            qual
        } else {
            pg_sys::makeBoolExpr(pg_sys::BoolExprType::AND_EXPR, args, -1).cast()
        }
    }
}

/// The conjuncts of `qual`, nested ANDs flattened (BETWEEN is parsed as an AND of its own).
/// SAFETY: `qual` is a valid expression.
unsafe fn conjuncts(qual: *mut Node) -> Vec<*mut Node> {
    // SAFETY: the expression's own pointers, checked by tag.
    unsafe {
        if is_a(qual, NodeTag::T_BoolExpr)
            && (*qual.cast::<pg_sys::BoolExpr>()).boolop == pg_sys::BoolExprType::AND_EXPR
        {
            elements((*qual.cast::<pg_sys::BoolExpr>()).args)
                .into_iter()
                .flat_map(|c| conjuncts(c))
                .collect()
        } else {
            vec![qual]
        }
    }
}

/// A bound on the id that a time comparison implies.
struct Bound {
    /// `x >= snowflake_lower_bound(rhs)` (or `<=` and the upper bound).
    clause: *mut Node,
    /// The same with the bound computed, `x >= 250757303500800000`, when `rhs` is a constant:
    /// the form the planner folds it to, and Citus sends to a shard.
    folded: Option<*mut Node>,
}

/// The bounds on `x` that `snowflake_timestamp(x) OP rhs` implies, if `clause` is that.
/// SAFETY: `clause` is a valid expression.
unsafe fn implied(clause: *mut Node) -> Vec<Bound> {
    // SAFETY: the expression's own pointers, checked by tag; catalog lookups by OID.
    unsafe {
        if !is_a(clause, NodeTag::T_OpExpr) {
            return Vec::new();
        }
        let op = clause.cast::<pg_sys::OpExpr>();
        let args = elements((*op).args);
        if args.len() != 2 {
            return Vec::new();
        }
        let (call, rhs, flipped) = if let Some(x) = timestamp_call(args[0]) {
            (x, args[1], false)
        } else if let Some(x) = timestamp_call(args[1]) {
            (x, args[0], true)
        } else {
            return Vec::new();
        };
        let (x, schema) = call;
        // In a worker-first layout (Seata's) the ids of a time range are one key range per
        // worker: a single bound on the id would keep nearly every row, so none is added and the
        // filter stays as written.
        if !settings::layout().is_time_first() {
            return Vec::new();
        }
        // Both sides are evaluated again in the bounds: only expressions that give the same
        // value each time may be.
        if [x, rhs]
            .iter()
            .any(|e| pg_sys::contain_volatile_functions(*e) || pg_sys::contain_subplans(*e))
        {
            return Vec::new();
        }
        // The operator by what it is, not by its name: a member of the built-in btree family
        // of date, timestamp and timestamptz (a user's `=` in another schema is not).
        let strategy = pg_sys::get_op_opfamily_strategy((*op).opno, DATETIME_BTREE_FAM_OID);
        // Which bounds the comparison implies, read as `snowflake_timestamp(x) OP rhs`.
        const LT: c_int = pg_sys::BTLessStrategyNumber as c_int;
        const LE: c_int = pg_sys::BTLessEqualStrategyNumber as c_int;
        const EQ: c_int = pg_sys::BTEqualStrategyNumber as c_int;
        const GE: c_int = pg_sys::BTGreaterEqualStrategyNumber as c_int;
        const GT: c_int = pg_sys::BTGreaterStrategyNumber as c_int;
        let (lower, upper) = match (strategy, flipped) {
            (GE | GT, false) | (LE | LT, true) => (true, false),
            (LE | LT, false) | (GE | GT, true) => (false, true),
            (EQ, _) => (true, true),
            _ => return Vec::new(),
        };
        let rhs = pg_sys::coerce_to_target_type(
            ptr::null_mut(),
            pg_sys::copyObjectImpl(rhs.cast()).cast(),
            pg_sys::exprType(rhs),
            pg_sys::TIMESTAMPTZOID,
            -1,
            pg_sys::CoercionContext::COERCION_IMPLICIT,
            pg_sys::CoercionForm::COERCE_IMPLICIT_CAST,
            -1,
        );
        if rhs.is_null() {
            return Vec::new();
        }
        // A constant time: its bounds, computed as the functions do (they never raise).
        let constant = is_a(rhs, NodeTag::T_Const)
            .then(|| {
                let c = rhs.cast::<pg_sys::Const>();
                TimestampWithTimeZone::from_datum((*c).constvalue, (*c).constisnull)
            })
            .flatten();
        let mut out = Vec::new();
        for (wanted, function, strategy, computed) in [
            (
                lower,
                "snowflake_lower_bound",
                pg_sys::BTGreaterEqualStrategyNumber,
                constant.map(snowflake_lower_bound),
            ),
            (
                upper,
                "snowflake_upper_bound",
                pg_sys::BTLessEqualStrategyNumber,
                constant.map(snowflake_upper_bound),
            ),
        ] {
            if !wanted {
                continue;
            }
            let Some(bound) = function_in(schema, function) else {
                return Vec::new();
            };
            let operator = pg_sys::get_opfamily_member(
                pg_sys::INTEGER_BTREE_FAM_OID,
                pg_sys::INT8OID,
                pg_sys::INT8OID,
                strategy as i16,
            );
            let call = pg_sys::makeFuncExpr(
                bound,
                pg_sys::INT8OID,
                pg_sys::list_make1_impl(
                    NodeTag::T_List,
                    pg_sys::ListCell {
                        ptr_value: pg_sys::copyObjectImpl(rhs.cast()),
                    },
                ),
                pg_sys::InvalidOid,
                pg_sys::InvalidOid,
                pg_sys::CoercionForm::COERCE_EXPLICIT_CALL,
            );
            let compare = |with: *mut Node| -> *mut Node {
                pg_sys::make_opclause(
                    operator,
                    pg_sys::BOOLOID,
                    false,
                    pg_sys::copyObjectImpl(x.cast()).cast(),
                    with.cast(),
                    pg_sys::InvalidOid,
                    pg_sys::InvalidOid,
                )
                .cast()
            };
            out.push(Bound {
                clause: compare(call.cast()),
                folded: computed.map(|id| {
                    compare(
                        pg_sys::makeConst(
                            pg_sys::INT8OID,
                            -1,
                            pg_sys::InvalidOid,
                            8,
                            pg_sys::Datum::from(id),
                            false,
                            true,
                        )
                        .cast(),
                    )
                }),
            });
        }
        out
    }
}

/// If `node` is a call of this extension's `snowflake_timestamp(bigint)`, its argument and the
/// schema it is in.
/// SAFETY: `node` is a valid expression.
unsafe fn timestamp_call(node: *mut Node) -> Option<(*mut Node, pg_sys::Oid)> {
    // SAFETY: the expression's own pointers, checked by tag; catalog lookups by OID.
    unsafe {
        if !is_a(node, NodeTag::T_FuncExpr) {
            return None;
        }
        let call = node.cast::<pg_sys::FuncExpr>();
        let args = elements((*call).args);
        if args.len() != 1 || pg_sys::exprType(args[0]) != pg_sys::INT8OID {
            return None;
        }
        let name = pg_sys::get_func_name((*call).funcid);
        if name.is_null() || CStr::from_ptr(name).to_bytes() != b"snowflake_timestamp" {
            return None;
        }
        // The bounds are looked up beside it, in the same schema: the query already trusts it.
        Some((args[0], pg_sys::get_func_namespace((*call).funcid)))
    }
}

/// The OID of `schema.name(timestamptz)`, if it exists.
/// SAFETY: called while planning, where catalog lookups are allowed.
unsafe fn function_in(schema: pg_sys::Oid, name: &str) -> Option<pg_sys::Oid> {
    // SAFETY: catalog lookups with valid, NUL-terminated names.
    unsafe {
        let nsp = pg_sys::get_namespace_name(schema);
        if nsp.is_null() {
            return None;
        }
        let function = CString::new(name).unwrap();
        let qualified = pg_sys::list_make2_impl(
            NodeTag::T_List,
            pg_sys::ListCell {
                ptr_value: pg_sys::makeString(nsp).cast(),
            },
            pg_sys::ListCell {
                ptr_value: pg_sys::makeString(pg_sys::pstrdup(function.as_ptr())).cast(),
            },
        );
        let arg = pg_sys::TIMESTAMPTZOID;
        let oid = pg_sys::LookupFuncName(qualified, 1, &arg, true);
        (oid != pg_sys::InvalidOid).then_some(oid)
    }
}
