//! Rollback-safe choppings: pieces merged so that every statement after
//! which the body may roll back lies in the first piece (the condition of
//! classic transaction chopping, seed 000 section 4.4). Runtime
//! Pipelining switches a group to this chopping when its rollback rate
//! passes a threshold (DESIGN 4.4, seed 000 section 4.6.6): a rollback
//! then never undoes a piece other transactions may have read.
//!
//! The merged first piece keeps the order of the pieces it absorbs (so
//! every dependency still holds) and spans their ranks; later pieces are
//! unchanged, so GR2 still holds between the first piece and the rest.

use crate::rp::{Piece, ProcChopping};
use crate::spec::ProcSpec;

/// The rollback-safe variant of `c`: pieces `0..=k` merged, where `k` is
/// the last piece holding a rollback statement. Unchanged when no piece
/// after the first holds one.
pub fn rollback_safe(s: &ProcSpec, c: &ProcChopping) -> ProcChopping {
    let last = c
        .pieces
        .iter()
        .rposition(|p| p.ops.iter().any(|&o| s.ops[o].rollback));
    let Some(k) = last.filter(|&k| k > 0) else {
        return c.clone();
    };
    let head = &c.pieces[..=k];
    let ops: Vec<usize> = head.iter().flat_map(|p| p.ops.iter().copied()).collect();
    let lo = head.iter().filter_map(|p| p.ranks.map(|r| r.0)).min();
    let hi = head.iter().filter_map(|p| p.ranks.map(|r| r.1)).max();
    let mut pieces = vec![Piece {
        ops,
        ranks: lo.zip(hi),
    }];
    pieces.extend(c.pieces[k + 1..].iter().cloned());
    ProcChopping {
        procedure: c.procedure.clone(),
        pieces,
    }
}

/// True if every rollback statement of `s` is in the first piece of `c`.
pub fn is_rollback_safe(s: &ProcSpec, c: &ProcChopping) -> bool {
    c.pieces
        .iter()
        .skip(1)
        .all(|p| p.ops.iter().all(|&o| !s.ops[o].rollback))
}
