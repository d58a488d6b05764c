//! What a run found: one [`Check`] per line, printable as the command prints it.

use std::fmt;

/// How one check came out. Only [`Outcome::Fail`] makes a run fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Pass,
    /// Allowed, but worth knowing (no reflection, a method not supported).
    Warn,
    Fail,
    /// Not applicable to this server or these options (the detail says why).
    Skip,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Warn => "WARN",
            Outcome::Fail => "FAIL",
            Outcome::Skip => "SKIP",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// One of [`crate::names`].
    pub name: String,
    pub outcome: Outcome,
    /// What was seen, or why it fails. Never a secret value.
    pub detail: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The server's address.
    pub address: String,
    /// In the order they ran.
    pub checks: Vec<Check>,
}

impl Report {
    pub(crate) fn new(address: &str) -> Self {
        Self {
            address: address.to_owned(),
            checks: Vec::new(),
        }
    }

    pub(crate) fn add(
        &mut self,
        name: impl Into<String>,
        outcome: Outcome,
        detail: impl Into<String>,
    ) {
        // One line per check, however the server phrased its messages.
        let detail = detail
            .into()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        self.checks.push(Check {
            name: name.into(),
            outcome,
            detail,
        });
    }

    /// No check failed.
    pub fn passed(&self) -> bool {
        !self.checks.iter().any(|c| c.outcome == Outcome::Fail)
    }

    /// The check of that name (see [`crate::names`]).
    pub fn get(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    pub fn outcome(&self, name: &str) -> Option<Outcome> {
        self.get(name).map(|c| c.outcome)
    }

    /// The names of the checks with this outcome, in order.
    pub fn with(&self, outcome: Outcome) -> Vec<&str> {
        self.checks
            .iter()
            .filter(|c| c.outcome == outcome)
            .map(|c| c.name.as_str())
            .collect()
    }

    /// The names of the failed checks, in order.
    pub fn failed(&self) -> Vec<&str> {
        self.with(Outcome::Fail)
    }

    /// `N checks: P passed, W warnings, F failed, S skipped`.
    pub fn summary(&self) -> String {
        let count = |o| self.checks.iter().filter(|c| c.outcome == o).count();
        let plural = |n: usize, word: &str| {
            if n == 1 {
                format!("{n} {word}")
            } else {
                format!("{n} {word}s")
            }
        };
        format!(
            "{}: {}: {} passed, {}, {} failed, {} skipped",
            self.address,
            plural(self.checks.len(), "check"),
            count(Outcome::Pass),
            plural(count(Outcome::Warn), "warning"),
            count(Outcome::Fail),
            count(Outcome::Skip),
        )
    }
}

/// One aligned line per check (`PASS  health  SERVING`), then the summary.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .checks
            .iter()
            .map(|c| c.name.chars().count())
            .max()
            .unwrap_or(0);
        for c in &self.checks {
            let line = format!("{}  {:width$}  {}", c.outcome.label(), c.name, c.detail);
            writeln!(f, "{}", line.trim_end())?;
        }
        write!(f, "{}", self.summary())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_aligned_and_summed_up() {
        let mut report = Report::new("127.0.0.1:8080");
        report.add("health", Outcome::Pass, "SERVING");
        report.add("reflection", Outcome::Warn, "no server\nreflection");
        report.add(
            "push",
            Outcome::Fail,
            "READ_ONLY, but PushSecret was accepted",
        );
        report.add("get-secret-map", Outcome::Skip, "");
        assert_eq!(
            report.to_string(),
            "PASS  health          SERVING\n\
             WARN  reflection      no server reflection\n\
             FAIL  push            READ_ONLY, but PushSecret was accepted\n\
             SKIP  get-secret-map\n\
             127.0.0.1:8080: 4 checks: 1 passed, 1 warning, 1 failed, 1 skipped"
        );
        assert!(!report.passed());
        assert_eq!(report.failed(), ["push"]);
        assert_eq!(report.outcome("reflection"), Some(Outcome::Warn));
    }
}
