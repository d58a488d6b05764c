//! Go's `text/template` with sprig and ESO's functions: what ESO's template engine v2 renders,
//! byte for byte. Pure: no I/O, no clock but sprig's `now`, and no randomness but sprig's
//! random functions.
//!
//! ```
//! use std::collections::BTreeMap;
//! use external_secrets_template::{Funcs, Template, Value};
//!
//! let funcs = Funcs::eso();
//! let t = Template::parse("greeting", "{{ .name | upper }}!", &funcs).unwrap();
//! let data = Value::Map(BTreeMap::from([("name".to_owned(), Value::from("ada"))]));
//! assert_eq!(t.execute(&data, 1024).unwrap(), "ADA!");
//! ```

mod budget;
mod builtins;
mod error;
mod eso;
mod exec;
pub mod funcs;
pub mod gofmt;
mod lex;
mod parse;
mod sprig;
mod stack;
mod value;

pub use budget::{Budget, Exceeded};
pub use error::Error;
pub use funcs::{Arity, FuncError, Funcs};
pub use value::{Value, go_bytes, go_string};

/// A parsed template (with every `define` it holds), ready to execute any number of times.
#[derive(Debug, Clone)]
pub struct Template {
    tree: parse::Tree,
    funcs: Funcs,
}

impl Template {
    /// As Go's `template.New(name).Option("missingkey=error").Funcs(funcs).Parse(text)`.
    pub fn parse(name: &str, text: &str, funcs: &Funcs) -> Result<Self, Error> {
        let tree = parse::parse(name, text, funcs)?;
        Ok(Self {
            tree,
            funcs: funcs.clone(),
        })
    }

    /// Executes with `data` as dot. Output beyond `limit` bytes stops execution with
    /// [`Error::TooLarge`]: a template cannot make the operator build an unbounded string.
    /// The work it may do is [`Budget::default`]'s.
    pub fn execute(&self, data: &Value, limit: usize) -> Result<String, Error> {
        self.execute_within(data, limit, &mut Budget::default())
    }

    /// [`Template::execute`], spending `budget`, which may go on to pay for other templates
    /// of the same render. Running out stops execution with [`Error::OverBudget`]. Everything
    /// here is `Send`, so a caller may render on a blocking thread of its own.
    pub fn execute_within(
        &self,
        data: &Value,
        limit: usize,
        budget: &mut Budget,
    ) -> Result<String, Error> {
        exec::execute(&self.tree, &self.funcs, data, limit, budget)
    }
}

impl Funcs {
    /// What ESO's engine v2 offers: sprig without `env`, `expandenv` and `getHostByName`, then
    /// ESO's own functions. Go's builtins (`and`, `printf`, ...) are the executor's, not here.
    /// Assembled here, above both families, so that the table's type stays below them.
    pub fn eso() -> Self {
        let mut funcs = Funcs::default();
        sprig::register(&mut funcs);
        eso::register(&mut funcs);
        funcs
    }
}
