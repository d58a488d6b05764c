//! sprig's `semver` and `semverCompare`, with the rules of Masterminds/semver v3.4.0 (the
//! version ESO builds with): versions parse leniently (`v1`, `1.2`, leading zeros), and
//! constraints take `=`, `!=`, `>`, `<`, `>=`, `<=`, `~`, `~>`, `^`, wildcards (`1.2.x`, `*`),
//! ranges (`1.2 - 1.4`), `,` or spaces for "and", and `||` for "or". A prerelease version
//! satisfies a constraint only if one of the constraints it is checked against names a
//! prerelease.
//!
//! Go's `semver` returns a `*semver.Version`, whose methods a template can call; ours is a map
//! with the same names as keys (`Major`, `Minor`, `Patch`, `Prerelease`, `Metadata`,
//! `Original`), so `(semver "1.2.3").Major` works, while printing it shows the map rather than
//! `1.2.3`.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use super::args::string_param;
use crate::funcs::{Arity, FuncError, Funcs};
use crate::value::Value;

pub fn register(funcs: &mut Funcs) {
    use Arity::Exact;
    funcs.insert("semver", Exact(1), |a| {
        let v = Version::parse(string_param(&a[0])?).map_err(FuncError)?;
        Ok(v.to_value())
    });
    funcs.insert("semverCompare", Exact(2), |a| {
        let constraint = string_param(&a[0])?;
        let version = string_param(&a[1])?;
        let constraints = Constraints::parse(constraint).map_err(FuncError)?;
        let v = Version::parse(version).map_err(FuncError)?;
        Ok(constraints.check(&v).into())
    });
}

/// Go's `\s`.
const WS: &str = r"[\t\n\f\r ]";
/// A version in a constraint, wildcards allowed (the `|` in the classes is Masterminds').
const CV: &str = r"v?([0-9|xX*]+)(\.[0-9|xX*]+)?(\.[0-9|xX*]+)?(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?";
/// The operators; the empty one, second, means "equal or tilde".
const OPS: &str = r"=||!=|>|<|>=|=>|<=|=<|~|~>|\^";

fn re(pattern: String) -> Regex {
    Regex::new(&pattern).expect("semver patterns are valid")
}

static LOOSE_VERSION: LazyLock<Regex> = LazyLock::new(|| {
    re(r"^v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?$".into())
});
static CONSTRAINT: LazyLock<Regex> =
    LazyLock::new(|| re(format!(r"^{WS}*({OPS}){WS}*({CV}){WS}*$")));
static RANGE: LazyLock<Regex> = LazyLock::new(|| re(format!(r"{WS}*({CV}){WS}+-{WS}+({CV}){WS}*")));
static FIND_CONSTRAINT: LazyLock<Regex> = LazyLock::new(|| re(format!(r"({OPS}){WS}*({CV})")));
static VALID_CONSTRAINT: LazyLock<Regex> = LazyLock::new(|| {
    re(format!(
        r"^({WS}*({OPS}){WS}*({CV}){WS}*)((?:{WS}+|,{WS}*)({OPS}){WS}*({CV}){WS}*)*$"
    ))
});

#[derive(Clone, Debug, PartialEq)]
struct Version {
    major: u64,
    minor: u64,
    patch: u64,
    pre: String,
    metadata: String,
    original: String,
}

impl Version {
    /// `semver.NewVersion` in its default (coercing) mode.
    fn parse(text: &str) -> Result<Self, String> {
        let caps = LOOSE_VERSION
            .captures(text)
            .ok_or_else(|| "invalid semantic version".to_owned())?;
        let group = |i: usize| caps.get(i).map_or("", |m| m.as_str());
        let segment = |s: &str| -> Result<u64, String> {
            let digits = s.trim_start_matches('.');
            if digits.is_empty() {
                return Ok(0);
            }
            digits.parse().map_err(|_| {
                "error parsing version segment: strconv.ParseUint: value out of range".to_owned()
            })
        };
        let v = Version {
            major: segment(group(1))?,
            minor: segment(group(2))?,
            patch: segment(group(3))?,
            pre: group(5).to_owned(),
            metadata: group(8).to_owned(),
            original: text.to_owned(),
        };
        let leading_zero = |p: &&str| p.len() > 1 && p.starts_with('0');
        if !v.pre.is_empty()
            && v.pre
                .split('.')
                .any(|p| p.bytes().all(|b| b.is_ascii_digit()) && leading_zero(&p))
        {
            return Err("version segment starts with 0".into());
        }
        Ok(v)
    }

    fn to_value(&self) -> Value {
        let int = |n: u64| Value::Int(i64::try_from(n).unwrap_or(i64::MAX));
        Value::Map(BTreeMap::from([
            ("Major".to_owned(), int(self.major)),
            ("Minor".to_owned(), int(self.minor)),
            ("Patch".to_owned(), int(self.patch)),
            ("Prerelease".to_owned(), Value::from(self.pre.as_str())),
            ("Metadata".to_owned(), Value::from(self.metadata.as_str())),
            ("Original".to_owned(), Value::from(self.original.as_str())),
        ]))
    }

    /// Precedence: numbers, then a release above its prereleases, then the prereleases part
    /// by part (metadata ignored).
    fn compare(&self, o: &Version) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(o.major, o.minor, o.patch))
            .then_with(|| match (self.pre.is_empty(), o.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => compare_prerelease(&self.pre, &o.pre),
            })
    }
}

fn compare_prerelease(a: &str, b: &str) -> Ordering {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split('.').collect(), b.split('.').collect());
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (
            a.get(i).copied().unwrap_or(""),
            b.get(i).copied().unwrap_or(""),
        );
        let d = compare_pre_part(x, y);
        if d != Ordering::Equal {
            return d;
        }
    }
    Ordering::Equal
}

/// Numeric parts compare as numbers and below alphanumeric ones, which compare as text; a
/// missing part is lowest.
fn compare_pre_part(s: &str, o: &str) -> Ordering {
    if s == o {
        return Ordering::Equal;
    }
    if s.is_empty() {
        return Ordering::Less;
    }
    if o.is_empty() {
        return Ordering::Greater;
    }
    match (s.parse::<u64>(), o.parse::<u64>()) {
        (Err(_), Err(_)) => {
            if s > o {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
        (Ok(_), Err(_)) => Ordering::Less,
        (Err(_), Ok(_)) => Ordering::Greater,
        (Ok(si), Ok(oi)) => {
            if si > oi {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    TildeOrEqual,
    NotEqual,
    Greater,
    Less,
    GreaterEqual,
    LessEqual,
    Tilde,
    Caret,
}

struct Constraint {
    op: Op,
    con: Version,
    dirty: bool,
    minor_dirty: bool,
    patch_dirty: bool,
}

struct Constraints {
    /// Alternatives (`||`), each a conjunction, with whether it names a prerelease.
    alternatives: Vec<(Vec<Constraint>, bool)>,
}

impl Constraints {
    /// `semver.NewConstraint`.
    fn parse(text: &str) -> Result<Self, String> {
        let text = rewrite_ranges(text);
        let mut alternatives = Vec::new();
        for part in text.split("||") {
            if !VALID_CONSTRAINT.is_match(part) {
                return Err("improper constraint".into());
            }
            let found: Vec<&str> = FIND_CONSTRAINT
                .find_iter(part)
                .map(|m| m.as_str())
                .collect();
            let found = if found.is_empty() { vec![part] } else { found };
            let constraints = found
                .into_iter()
                .map(Constraint::parse)
                .collect::<Result<Vec<_>, _>>()?;
            let has_pre = constraints.iter().any(|c| !c.con.pre.is_empty());
            alternatives.push((constraints, has_pre));
        }
        Ok(Constraints { alternatives })
    }

    fn check(&self, v: &Version) -> bool {
        self.alternatives
            .iter()
            .any(|(all, pre)| all.iter().all(|c| c.check(v, *pre)))
    }
}

/// `1.2 - 1.4.5` → `>= 1.2, <= 1.4.5 `.
fn rewrite_ranges(text: &str) -> String {
    let mut out = text.to_owned();
    for caps in RANGE.captures_iter(text) {
        let whole = caps.get(0).map_or("", |m| m.as_str());
        let (from, to) = (
            caps.get(1).map_or("", |m| m.as_str()),
            caps.get(11).map_or("", |m| m.as_str()),
        );
        out = out.replacen(whole, &format!(">= {from}, <= {to} "), 1);
    }
    out
}

fn is_x(s: &str) -> bool {
    matches!(s, "x" | "X" | "*")
}

impl Constraint {
    fn parse(text: &str) -> Result<Self, String> {
        let caps = CONSTRAINT
            .captures(text)
            .ok_or_else(|| "improper constraint".to_owned())?;
        let group = |i: usize| caps.get(i).map_or("", |m| m.as_str());
        let op = match group(1) {
            "" | "=" => Op::TildeOrEqual,
            "!=" => Op::NotEqual,
            ">" => Op::Greater,
            "<" => Op::Less,
            ">=" | "=>" => Op::GreaterEqual,
            "<=" | "=<" => Op::LessEqual,
            "~" | "~>" => Op::Tilde,
            _ => Op::Caret,
        };
        let (major, minor, patch, pre) = (group(3), group(4), group(5), group(6));
        let (mut dirty, mut minor_dirty, mut patch_dirty) = (false, false, false);
        let version = if is_x(major) {
            dirty = true;
            format!("0.0.0{pre}")
        } else if is_x(minor.trim_start_matches('.')) || minor.is_empty() {
            dirty = true;
            minor_dirty = true;
            format!("{major}.0.0{pre}")
        } else if is_x(patch.trim_start_matches('.')) || patch.is_empty() {
            dirty = true;
            patch_dirty = true;
            format!("{major}{minor}.0{pre}")
        } else {
            group(2).to_owned()
        };
        let con = Version::parse(&version).map_err(|_| "constraint parser error".to_owned())?;
        Ok(Constraint {
            op,
            con,
            dirty,
            minor_dirty,
            patch_dirty,
        })
    }

    fn check(&self, v: &Version, include_pre: bool) -> bool {
        if !v.pre.is_empty() && !include_pre {
            return false;
        }
        let c = &self.con;
        match self.op {
            Op::TildeOrEqual if self.dirty => self.tilde(v),
            Op::TildeOrEqual => v.compare(c) == Ordering::Equal,
            Op::Tilde => self.tilde(v),
            Op::NotEqual => self.not_equal(v),
            Op::Greater => self.greater(v),
            Op::Less => v.compare(c) == Ordering::Less,
            Op::GreaterEqual => v.compare(c) != Ordering::Less,
            Op::LessEqual => self.less_equal(v),
            Op::Caret => self.caret(v),
        }
    }

    fn tilde(&self, v: &Version) -> bool {
        let c = &self.con;
        if v.compare(c) == Ordering::Less {
            return false;
        }
        if (c.major, c.minor, c.patch) == (0, 0, 0) && !self.minor_dirty && !self.patch_dirty {
            return true;
        }
        v.major == c.major && (v.minor == c.minor || self.minor_dirty)
    }

    fn not_equal(&self, v: &Version) -> bool {
        let c = &self.con;
        if self.dirty {
            if c.major != v.major {
                return true;
            }
            if c.minor != v.minor && !self.minor_dirty {
                return true;
            }
            if self.minor_dirty {
                return false;
            }
            if c.patch != v.patch && !self.patch_dirty {
                return true;
            }
            if self.patch_dirty {
                if !v.pre.is_empty() || !c.pre.is_empty() {
                    return compare_prerelease(&v.pre, &c.pre) != Ordering::Equal;
                }
                return false;
            }
        }
        v.compare(c) != Ordering::Equal
    }

    fn greater(&self, v: &Version) -> bool {
        let c = &self.con;
        if !self.dirty {
            return v.compare(c) == Ordering::Greater;
        }
        if v.major != c.major {
            return v.major > c.major;
        }
        if self.minor_dirty {
            return false;
        }
        if self.patch_dirty {
            return v.minor > c.minor;
        }
        v.compare(c) == Ordering::Greater
    }

    fn less_equal(&self, v: &Version) -> bool {
        let c = &self.con;
        if !self.dirty {
            return v.compare(c) != Ordering::Greater;
        }
        if v.major > c.major {
            return false;
        }
        !(v.major == c.major && v.minor > c.minor && !self.minor_dirty)
    }

    fn caret(&self, v: &Version) -> bool {
        let c = &self.con;
        if v.compare(c) == Ordering::Less {
            return false;
        }
        if c.major > 0 || self.minor_dirty {
            return v.major == c.major;
        }
        if v.major > 0 {
            return false;
        }
        if c.minor > 0 || self.patch_dirty {
            return v.minor == c.minor;
        }
        if v.minor > 0 {
            return false;
        }
        c.patch == v.patch
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, s};

    #[test]
    fn versions_parse_leniently() {
        check(&[
            (
                "semver",
                vec![s("1.2.3")],
                "map[Major:1 Metadata: Minor:2 Original:1.2.3 Patch:3 Prerelease:]",
            ),
            (
                "semver",
                vec![s("v1.2-beta.1+build.5")],
                "map[Major:1 Metadata:build.5 Minor:2 Original:v1.2-beta.1+build.5 Patch:0 Prerelease:beta.1]",
            ),
            (
                "semver",
                vec![s("01.002")],
                "map[Major:1 Metadata: Minor:2 Original:01.002 Patch:0 Prerelease:]",
            ),
            ("semver", vec![s("1.2.3.4")], "ERR:invalid semantic version"),
            ("semver", vec![s("")], "ERR:invalid semantic version"),
            (
                "semver",
                vec![s("1.2.3-01")],
                "ERR:version segment starts with 0",
            ),
            (
                "semver",
                vec![s("99999999999999999999")],
                "ERR:error parsing version segment: strconv.ParseUint: value out of range",
            ),
        ]);
    }

    #[test]
    fn constraints_follow_masterminds() {
        let mut cases = Vec::new();
        for (constraint, version, want) in [
            ("^1.2", "1.5.0", "true"),
            ("^1.2", "2.0.0", "false"),
            ("^1.2.3", "1.2.2", "false"),
            ("^0.2.3", "0.2.9", "true"),
            ("^0.2.3", "0.3.0", "false"),
            ("^0.0.3", "0.0.3", "true"),
            ("^0.0.3", "0.0.4", "false"),
            ("^0", "0.9.0", "true"),
            ("~1.2.3", "1.2.9", "true"),
            ("~1.2.3", "1.3.0", "false"),
            ("~1", "1.9.0", "true"),
            ("~1", "2.0.0", "false"),
            ("~>1.2", "1.2.5", "true"),
            (">= 1.2, < 2", "1.9.9", "true"),
            (">= 1.2, < 2", "2.0.0", "false"),
            (">=1.2 <2", "1.5.0", "true"),
            ("<1.0 || >=2.0", "1.5.0", "false"),
            ("<1.0 || >=2.0", "2.1.0", "true"),
            ("1.2.x", "1.2.7", "true"),
            ("1.2.x", "1.3.0", "false"),
            ("*", "5.0.0", "true"),
            ("*", "1.0.0-beta", "false"),
            ("1.2 - 1.4.5", "1.4.5", "true"),
            ("1.2 - 1.4.5", "1.4.6", "false"),
            ("1.2.3", "1.2.3", "true"),
            ("=1.2.3", "1.2.4", "false"),
            ("1.2", "1.2.9", "true"),
            ("!=1.2.3", "1.2.4", "true"),
            ("!=1.2.3", "1.2.3", "false"),
            ("!=1.2.x", "1.2.4", "false"),
            ("!=1.x", "2.0.0", "true"),
            (">1.2", "1.3.0", "true"),
            (">1.2", "1.2.5", "false"),
            (">1.x", "2.0.0", "true"),
            (">1.x", "1.9.0", "false"),
            ("<=1.2", "1.2.9", "true"),
            ("<=1.2", "1.3.0", "false"),
            ("<=1.2.3", "1.2.3", "true"),
            (">=1.0.0-alpha", "1.0.0-beta", "true"),
            (">=1.0.0", "1.0.0-beta", "false"),
            (">=1.0.0-alpha.2", "1.0.0-alpha.10", "true"),
            (">=1.0.0-alpha.b", "1.0.0-alpha.10", "false"),
            (">1.0.0-rc.1", "1.0.0", "true"),
            ("v1.2.3", "v1.2.3", "true"),
            (">= 1.2.3+build", "1.2.3", "true"),
            ("1.2.3 || foo", "1.2.3", "ERR:improper constraint"),
            ("", "1.2.3", "ERR:improper constraint"),
            (">=1.2.3", "x.y", "ERR:invalid semantic version"),
            (">=1.0-01", "1.0.0", "ERR:constraint parser error"),
            ("1.2.3", "1.2.3-beta", "false"),
        ] {
            cases.push(("semverCompare", vec![s(constraint), s(version)], want));
        }
        check(&cases);
    }
}
