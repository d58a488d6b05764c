//! Key renames of a `rewrite` list: ESO gives ExternalSecret `dataFrom[].rewrite` and PushSecret
//! `dataTo[].rewrite` the same regexp and template steps.

use api::external_secret::{RewriteRegexp, RewriteTransform};
use regex::Regex;

use crate::templating::{KeyTransform, TemplateError};

/// One compiled rewrite step: old key name to new.
pub enum Rename {
    Regexp { pattern: Regex, target: String },
    Transform(KeyTransform),
}

#[derive(Debug, thiserror::Error)]
pub enum RenameError {
    /// A regular expression that does not compile.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error(transparent)]
    Template(#[from] TemplateError),
}

impl Rename {
    /// The step at `field` (`...rewrite[j]`); `None` when it sets neither kind (a step of
    /// another kind, or none, which the CRDs' rules refuse).
    pub fn new(
        regexp: Option<&RewriteRegexp>,
        transform: Option<&RewriteTransform>,
        field: &str,
    ) -> Result<Option<Self>, RenameError> {
        match (regexp, transform) {
            (Some(re), _) => {
                let pattern = Regex::new(&re.source).map_err(|e| RenameError::Invalid {
                    field: format!("{field}.regexp.source"),
                    message: e.to_string(),
                })?;
                Ok(Some(Self::Regexp {
                    pattern,
                    target: re.target.clone(),
                }))
            }
            (None, Some(t)) => Ok(Some(Self::Transform(KeyTransform::new(
                &format!("{field}.transform.template"),
                &t.template,
            )?))),
            (None, None) => Ok(None),
        }
    }

    pub fn apply(&self, key: &str) -> Result<String, TemplateError> {
        match self {
            // Go's regexp uses ${1} for groups, as Rust's regex does.
            Self::Regexp { pattern, target } => {
                Ok(pattern.replace_all(key, target.as_str()).into_owned())
            }
            Self::Transform(t) => t.apply(key),
        }
    }
}
