//! (being written)
use crate::parse::Tree;
use crate::{Error, Funcs, Value};

pub fn execute(tree: &Tree, funcs: &Funcs, data: &Value, limit: usize) -> Result<String, Error> {
    let _ = (tree, funcs, data, limit);
    unimplemented!("language helper")
}
