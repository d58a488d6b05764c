//! (being written)
use crate::Funcs;

pub fn register(funcs: &mut Funcs) {
    let _ = funcs;
}
