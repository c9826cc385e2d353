//! The run machinery: one exec or wait from its input to its result.
//! [`env`] is what a drive gets from the facade; [`drive`] runs it,
//! [`drain`] feeds nested results into the VM, [`bridge`] answers the
//! guest's requests (parsed by [`request`]), [`calls`] tracks nested calls,
//! [`outcome`] shapes results and suspends runs (a [`record`] in the run
//! store, the live copy in [`live`]), [`resume`] brings them back, and
//! [`park`] frees the VM of a cell that only awaits nested calls within
//! its exec or wait. [`prepare`] and [`precheck`] check a cell before it
//! runs.

pub(crate) mod bridge;
pub(crate) mod calls;
pub(crate) mod drain;
pub(crate) mod drive;
pub(crate) mod env;
pub(crate) mod follow;
pub(crate) mod host;
pub(crate) mod live;
pub(crate) mod outcome;
pub(crate) mod park;
pub(crate) mod precheck;
pub(crate) mod prepare;
pub(crate) mod record;
pub(crate) mod request;
pub(crate) mod resume;
pub(crate) mod sink;
pub(crate) mod state;
