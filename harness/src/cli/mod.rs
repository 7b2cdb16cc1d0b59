//! The commands whose work is more than a call into the library: one file each.

pub(crate) mod emulate;
pub(crate) mod run;
pub(crate) mod sweep;
