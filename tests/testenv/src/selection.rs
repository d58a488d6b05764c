//! For a test binary with its own `main` (libtest-mimic) whose trials share a fixture that is
//! costly to start (a control plane, a server): set it up only when a trial that needs it runs.

use std::process::ExitCode;
use std::sync::OnceLock;

/// Which tests a libtest command line runs: none with `--list`; with a filter, those whose name
/// contains it (is it, with `--exact`); otherwise all.
#[derive(Clone, Copy, Debug)]
pub struct Selection<'a> {
    pub list: bool,
    pub filter: Option<&'a str>,
    pub exact: bool,
}

impl<'a> From<&'a libtest_mimic::Arguments> for Selection<'a> {
    fn from(args: &'a libtest_mimic::Arguments) -> Self {
        Self {
            list: args.list,
            filter: args.filter.as_deref(),
            exact: args.exact,
        }
    }
}

impl Selection<'_> {
    /// Whether the test `name` runs.
    pub fn runs(&self, name: &str) -> bool {
        !self.list
            && match self.filter {
                Some(filter) if self.exact => name == filter,
                Some(filter) => name.contains(filter),
                None => true,
            }
    }

    /// Sets `fixture` up with `setup` when one of the tests `names` runs. When that fails, the
    /// error is printed after `what` and the binary should exit with the code this returns.
    pub fn set_up<'n, T>(
        &self,
        names: impl IntoIterator<Item = &'n str>,
        fixture: &OnceLock<T>,
        what: &str,
        setup: impl FnOnce() -> anyhow::Result<T>,
    ) -> Result<(), ExitCode> {
        if !names.into_iter().any(|name| self.runs(name)) {
            return Ok(());
        }
        match setup() {
            Ok(set_up) => {
                let _ = fixture.set(set_up);
                Ok(())
            }
            Err(e) => {
                eprintln!("{what}: {e:#}");
                Err(ExitCode::FAILURE)
            }
        }
    }
}
