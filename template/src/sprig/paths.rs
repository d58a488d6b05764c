//! Slash-separated path functions (Go's `path`, and `path/filepath` on Linux, where ESO runs
//! and where both behave alike) and URL parsing and joining (Go's `net/url`).

mod url;

use crate::funcs::{Arity, FuncResult, Funcs, expect_string};
use crate::value::Value;

pub fn register(funcs: &mut Funcs) {
    funcs.insert("base", Arity::Exact(1), |a| text(base, a));
    funcs.insert("dir", Arity::Exact(1), |a| text(dir, a));
    funcs.insert("clean", Arity::Exact(1), |a| text(clean, a));
    funcs.insert("ext", Arity::Exact(1), |a| text(ext, a));
    funcs.insert("isAbs", Arity::Exact(1), is_abs);
    // On Linux, Go's path/filepath behaves exactly like path.
    funcs.insert("osBase", Arity::Exact(1), |a| text(base, a));
    funcs.insert("osDir", Arity::Exact(1), |a| text(dir, a));
    funcs.insert("osClean", Arity::Exact(1), |a| text(clean, a));
    funcs.insert("osExt", Arity::Exact(1), |a| text(ext, a));
    funcs.insert("osIsAbs", Arity::Exact(1), is_abs);
    url::register(funcs);
}

fn text(f: fn(&str) -> String, args: &[Value]) -> FuncResult {
    Ok(Value::String(f(expect_string(&args[0])?)))
}

fn is_abs(args: &[Value]) -> FuncResult {
    Ok(Value::Bool(expect_string(&args[0])?.starts_with('/')))
}

/// Go's `path.Clean`: the shortest equivalent path, lexically.
fn clean(path: &str) -> String {
    if path.is_empty() {
        return ".".into();
    }
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// Go's `path.Base`: the last element, trailing slashes ignored.
fn base(path: &str) -> String {
    if path.is_empty() {
        return ".".into();
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/".into();
    }
    trimmed
        .rsplit_once('/')
        .map_or(trimmed, |(_, last)| last)
        .to_owned()
}

/// Go's `path.Dir`: everything up to the last slash, cleaned.
fn dir(path: &str) -> String {
    let upto = path.rfind('/').map_or(0, |i| i + 1);
    clean(&path[..upto])
}

/// Go's `path.Ext`: from the last dot of the last element, or empty.
fn ext(path: &str) -> String {
    for (i, c) in path.char_indices().rev() {
        match c {
            '/' => break,
            '.' => return path[i..].to_owned(),
            _ => {}
        }
    }
    String::new()
}

#[cfg(test)]
mod tests;
