//! A Callas transaction's state at its coordinator.

use super::prelude::*;
use crate::protocol::TxnExt;

/// A Callas transaction's state at its coordinator.
pub struct CallasState {
    pub mechanism: Mechanism,
    /// Same-group transactions this one depends on (reported by the
    /// partitions when a lock was granted next to their nexus locks), and
    /// their progress (`None`: gone from the board, so released).
    pub after: SmallVec<[TxnId; 4]>,
    pub deps: SmallVec<[Option<Arc<Progress>>; 4]>,
    /// Position of the next statement (chop: each is a piece).
    pub seq: u32,
    /// Runtime Pipelining and `sc`: the procedure's pieces, the current
    /// piece (number, rank) and the partitions it touched.
    pub pieces: Option<Arc<ProcPieces>>,
    /// Runs the rollback-safe chopping (the group is in safe mode).
    pub safe: bool,
    pub piece: Option<(u32, Option<u32>)>,
    pub piece_parts: SmallVec<[usize; 4]>,
    /// The current piece's last statement (`Placed::ends_piece`) ran: its
    /// locks where it ran are nexus locks already, so another statement
    /// of the piece means the body and the analysis disagree.
    pub piece_ended: bool,
    /// The rank-progress wait of the current piece left to the partitions
    /// (`LockSpec::after_rank`): the transaction followed, the rank, and
    /// its progress. Its statements carry it until the coordinator sees
    /// the rank reached.
    pub rank_hold: Option<(TxnId, u32, Arc<Progress>)>,
    /// This transaction's own progress, on the board.
    pub progress: Arc<Progress>,
    /// `sc`: the open piece and the results the body is replayed from.
    pub sc: Option<Box<super::sc::ScRun>>,
    /// The board its dependencies are looked up on.
    pub board: Arc<NexusBoard>,
}

impl CallasState {
    pub fn note_after(&mut self, txns: &[TxnId]) {
        for t in txns {
            if !self.after.contains(t) {
                self.after.push(*t);
                let p = self.board.get(*t);
                if let Some(p) = p
                    .as_ref()
                    .filter(|p| p.outcome.load(Ordering::Acquire) == 0)
                {
                    self.progress.below.lock().push(p.clone());
                }
                self.deps.push(p);
            }
        }
    }

    /// Drops the dependencies noted after the first `mark` (those of a
    /// piece that rolled back).
    pub fn forget_after(&mut self, mark: usize) {
        if mark >= self.after.len() {
            return;
        }
        let gone: SmallVec<[Arc<Progress>; 4]> =
            self.deps[mark..].iter().flatten().cloned().collect();
        self.after.truncate(mark);
        self.deps.truncate(mark);
        self.progress
            .below
            .lock()
            .retain(|p| !gone.iter().any(|g| Arc::ptr_eq(g, p)));
    }

    /// The partitions of the current piece (Runtime Pipelining: they learn
    /// it ended; `sc`: they commit it).
    pub fn touch(&mut self, p: usize) {
        if self.pieces.is_some() && !self.piece_parts.contains(&p) {
            self.piece_parts.push(p);
        }
    }
}

impl TxnExt for CallasState {
    fn touched(&mut self, p: usize) {
        self.touch(p);
    }

    fn depends_on(&mut self, txns: &[TxnId]) {
        self.note_after(txns);
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The Callas state of a transaction, if it runs in a group.
pub fn state_mut(st: &mut TxnState) -> Option<&mut CallasState> {
    st.ext
        .as_mut()
        .and_then(|e| e.as_any_mut().downcast_mut::<CallasState>())
}

/// [`state_mut`], to read.
pub fn state_ref(st: &TxnState) -> Option<&CallasState> {
    st.ext
        .as_ref()
        .and_then(|e| e.as_any().downcast_ref::<CallasState>())
}
