//! `urlParse` and `urlJoin`: Go's `net/url` parsing and `URL.String()`, rewritten byte for byte
//! (Go's rules differ from the WHATWG URL standard that Rust's URL crates follow). Error
//! messages keep Go's wording but leave out the URL, which may hold credentials.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::funcs::{Arity, FuncError, FuncResult, Funcs, expect_string, wrong_type};
use crate::value::Value;

pub(super) fn register(funcs: &mut Funcs) {
    funcs.insert("urlParse", Arity::Exact(1), url_parse);
    funcs.insert("urlJoin", Arity::Exact(1), url_join);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Path,
    Host,
    Zone,
    UserPassword,
    Fragment,
}

/// Go's `shouldEscape`.
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if matches!(mode, Mode::Host | Mode::Zone) && b"!$&'()*+,;=:[]<>\"".contains(&c) {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => match mode {
            Mode::Path => c == b'?',
            Mode::UserPassword => matches!(c, b'@' | b'/' | b'?' | b':'),
            Mode::Fragment => false,
            // Host and zone reach here only for '/', '?' and '@'.
            Mode::Host | Mode::Zone => true,
        },
        b'!' | b'(' | b')' | b'*' if mode == Mode::Fragment => false,
        _ => true,
    }
}

fn escape(s: &[u8], mode: Mode) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s {
        if should_escape(c, mode) {
            out.push_str(&format!("%{c:02X}"));
        } else {
            out.push(c as char);
        }
    }
    out
}

fn hex_value(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Go's `unescape` for the modes a URL parse uses.
fn unescape(s: &[u8], mode: Mode) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == b'%' {
            let (Some(hi), Some(lo)) = (
                s.get(i + 1).copied().and_then(hex_value),
                s.get(i + 2).copied().and_then(hex_value),
            ) else {
                return Err("invalid URL escape".into());
            };
            let is_percent = hi == 2 && lo == 5;
            // A host may %-encode only non-ASCII bytes (and %25, for IPv6 zones).
            if mode == Mode::Host && hi < 8 && !is_percent {
                return Err("invalid URL escape".into());
            }
            let byte = hi << 4 | lo;
            if mode == Mode::Zone && !is_percent && byte != b' ' && should_escape(byte, Mode::Host)
            {
                return Err("invalid URL escape".into());
            }
            out.push(byte);
            i += 3;
            continue;
        }
        if matches!(mode, Mode::Host | Mode::Zone) && c < 0x80 && should_escape(c, mode) {
            return Err("invalid character in host name".into());
        }
        out.push(c);
        i += 1;
    }
    Ok(out)
}

#[derive(Default)]
struct Url {
    scheme: String,
    opaque: Vec<u8>,
    user: Option<(Vec<u8>, Option<Vec<u8>>)>,
    host: Vec<u8>,
    path: Vec<u8>,
    raw_query: Vec<u8>,
    fragment: Vec<u8>,
    force_query: bool,
    omit_host: bool,
}

/// Go's `url.Parse`.
fn parse(raw: &str) -> Result<Url, String> {
    let (rest, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    let mut url = parse_without_fragment(rest.as_bytes())?;
    url.fragment = unescape(fragment.as_bytes(), Mode::Fragment)?;
    Ok(url)
}

fn parse_without_fragment(raw: &[u8]) -> Result<Url, String> {
    if raw.iter().any(|b| *b < b' ' || *b == 0x7f) {
        return Err("net/url: invalid control character in URL".into());
    }
    let mut url = Url::default();
    if raw == b"*" {
        url.path = b"*".to_vec();
        return Ok(url);
    }
    let (scheme, rest) = split_scheme(raw)?;
    url.scheme = String::from_utf8_lossy(scheme).to_ascii_lowercase();
    let mut rest = rest;
    let question_marks = rest.iter().filter(|b| **b == b'?').count();
    if rest.ends_with(b"?") && question_marks == 1 {
        url.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some(q) = rest.iter().position(|b| *b == b'?') {
        url.raw_query = rest[q + 1..].to_vec();
        rest = &rest[..q];
    }
    if !rest.starts_with(b"/") {
        if !url.scheme.is_empty() {
            // A rootless path after a scheme is opaque (RFC 3986).
            url.opaque = rest.to_vec();
            return Ok(url);
        }
        let segment = rest.split(|b| *b == b'/').next().unwrap_or_default();
        if segment.contains(&b':') {
            return Err("first path segment in URL cannot contain colon".into());
        }
    }
    if (!url.scheme.is_empty() || !rest.starts_with(b"///")) && rest.starts_with(b"//") {
        let authority = &rest[2..];
        let (authority, path) = match authority.iter().position(|b| *b == b'/') {
            Some(i) => (&authority[..i], &authority[i..]),
            None => (authority, &b""[..]),
        };
        parse_authority(&mut url, authority)?;
        rest = path;
    } else if !url.scheme.is_empty() && rest.starts_with(b"/") {
        url.omit_host = true;
    }
    url.path = unescape(rest, Mode::Path)?;
    Ok(url)
}

/// Go's `getScheme`: letters, then letters, digits, `+`, `-` or `.`, up to a colon.
fn split_scheme(raw: &[u8]) -> Result<(&[u8], &[u8]), String> {
    for (i, &c) in raw.iter().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".into()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => break,
        }
    }
    Ok((&[], raw))
}

fn parse_authority(url: &mut Url, authority: &[u8]) -> Result<(), String> {
    let at = authority.iter().rposition(|b| *b == b'@');
    let host_part = at.map_or(authority, |i| &authority[i + 1..]);
    url.host = parse_host(&url.scheme, host_part)?;
    let Some(at) = at else {
        return Ok(());
    };
    let userinfo = &authority[..at];
    let valid = userinfo
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(c));
    if !valid {
        return Err("net/url: invalid userinfo".into());
    }
    url.user = Some(match userinfo.iter().position(|b| *b == b':') {
        None => (unescape(userinfo, Mode::UserPassword)?, None),
        Some(colon) => (
            unescape(&userinfo[..colon], Mode::UserPassword)?,
            Some(unescape(&userinfo[colon + 1..], Mode::UserPassword)?),
        ),
    });
    Ok(())
}

fn valid_optional_port(port: &[u8]) -> bool {
    match port.split_first() {
        None => true,
        Some((b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    }
}

/// Go's `parseHost`, including its bracketed IPv6 literals with zones.
fn parse_host(scheme: &str, host: &[u8]) -> Result<Vec<u8>, String> {
    match host.iter().rposition(|b| *b == b'[') {
        Some(open) if open > 0 => Err("invalid IP-literal".into()),
        Some(_) => {
            let close = host
                .iter()
                .rposition(|b| *b == b']')
                .ok_or("missing ']' in host")?;
            let colon_port = &host[close + 1..];
            if !valid_optional_port(colon_port) {
                return Err("invalid port after host".into());
            }
            let hostname = &host[1..close];
            let unescaped = match hostname.windows(3).position(|w| w == b"%25") {
                Some(zone) => {
                    let mut h = unescape(&hostname[..zone], Mode::Host)?;
                    h.extend(unescape(&hostname[zone..], Mode::Zone)?);
                    h
                }
                None => unescape(hostname, Mode::Host)?,
            };
            if is_ipv4_literal(&unescaped)? {
                return Err("invalid IP-literal".into());
            }
            let mut out = b"[".to_vec();
            out.extend_from_slice(&unescaped);
            out.push(b']');
            out.extend_from_slice(colon_port);
            Ok(out)
        }
        None => {
            if let Some(first) = host.iter().position(|b| *b == b':') {
                let last = host.iter().rposition(|b| *b == b':').unwrap_or(first);
                // Go 1.26 allows several colons (host lists) except in http(s) URLs.
                let i = if scheme == "http" || scheme == "https" {
                    first
                } else {
                    last
                };
                if !valid_optional_port(&host[i..]) {
                    return Err("invalid port after host".into());
                }
            }
            unescape(host, Mode::Host)
        }
    }
}

/// Go's `netip.ParseAddr` on a bracketed host: whether it is IPv4 (refused there), or an
/// error when it is no IP address at all.
fn is_ipv4_literal(host: &[u8]) -> Result<bool, String> {
    let invalid = || "invalid host: unable to parse IP".to_owned();
    let text = std::str::from_utf8(host).map_err(|_| invalid())?;
    let (addr, zone) = match text.split_once('%') {
        Some((addr, zone)) => (addr, Some(zone)),
        None => (text, None),
    };
    match (addr.parse::<IpAddr>().map_err(|_| invalid())?, zone) {
        (_, Some("")) | (IpAddr::V4(_), Some(_)) => Err(invalid()),
        (IpAddr::V4(_), None) => Ok(true),
        (IpAddr::V6(_), _) => Ok(false),
    }
}

/// Go's `Userinfo.String()`.
fn userinfo_string((user, password): &(Vec<u8>, Option<Vec<u8>>)) -> String {
    let mut s = escape(user, Mode::UserPassword);
    if let Some(password) = password {
        s.push(':');
        s.push_str(&escape(password, Mode::UserPassword));
    }
    s
}

/// Go's `URL.String()` for a URL with no raw path or raw fragment hints.
fn to_string(url: &Url) -> String {
    let mut out = String::new();
    if !url.scheme.is_empty() {
        out.push_str(&url.scheme);
        out.push(':');
    }
    if !url.opaque.is_empty() {
        out.push_str(&String::from_utf8_lossy(&url.opaque));
    } else {
        let has_authority = !url.scheme.is_empty() || !url.host.is_empty() || url.user.is_some();
        let omit = url.omit_host && url.host.is_empty() && url.user.is_none();
        if has_authority && !omit {
            if !url.host.is_empty() || !url.path.is_empty() || url.user.is_some() {
                out.push_str("//");
            }
            if let Some(user) = &url.user {
                out.push_str(&userinfo_string(user));
                out.push('@');
            }
            out.push_str(&escape(&url.host, Mode::Host));
        }
        let path = if url.path == b"*" {
            "*".to_owned()
        } else {
            escape(&url.path, Mode::Path)
        };
        if !path.is_empty() && !path.starts_with('/') && !url.host.is_empty() {
            out.push('/');
        }
        if out.is_empty() && path.split('/').next().unwrap_or_default().contains(':') {
            out.push_str("./");
        }
        out.push_str(&path);
    }
    if url.force_query || !url.raw_query.is_empty() {
        out.push('?');
        out.push_str(&String::from_utf8_lossy(&url.raw_query));
    }
    if !url.fragment.is_empty() {
        out.push('#');
        out.push_str(&escape(&url.fragment, Mode::Fragment));
    }
    out
}

/// A parsed part as text; Go's strings may hold any bytes, ours only UTF-8.
fn text(bytes: Vec<u8>) -> Result<Value, FuncError> {
    String::from_utf8(bytes)
        .map(Value::String)
        .map_err(|_| FuncError("unable to parse url: escaped bytes are not valid UTF-8".into()))
}

/// Go's `URL.Hostname()`: the host without port and brackets.
fn hostname(host: &[u8]) -> Vec<u8> {
    let mut h = host;
    if let Some(colon) = h.iter().rposition(|b| *b == b':')
        && valid_optional_port(&h[colon..])
    {
        h = &h[..colon];
    }
    if h.len() >= 2 && h.starts_with(b"[") && h.ends_with(b"]") {
        h = &h[1..h.len() - 1];
    }
    h.to_vec()
}

fn url_parse(args: &[Value]) -> FuncResult {
    let url = parse(expect_string(&args[0])?)
        .map_err(|e| FuncError(format!("unable to parse url: {e}")))?;
    let userinfo = url.user.as_ref().map(userinfo_string).unwrap_or_default();
    Ok(Value::Map(BTreeMap::from([
        ("scheme".to_owned(), Value::String(url.scheme.clone())),
        ("hostname".to_owned(), text(hostname(&url.host))?),
        ("host".to_owned(), text(url.host)?),
        ("path".to_owned(), text(url.path)?),
        ("query".to_owned(), text(url.raw_query)?),
        ("opaque".to_owned(), text(url.opaque)?),
        ("fragment".to_owned(), text(url.fragment)?),
        ("userinfo".to_owned(), Value::String(userinfo)),
    ])))
}

/// A string field of `urlJoin`'s dict; sprig panics on any other type.
fn field(dict: &BTreeMap<String, Value>, key: &str) -> Result<String, FuncError> {
    match dict.get(key) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Nil) => Err(FuncError(
            "runtime error: invalid memory address or nil pointer dereference".into(),
        )),
        Some(other) => Err(FuncError(format!(
            "unable to parse {key} key, must be of type string, but {} found",
            go_kind(other)
        ))),
    }
}

/// Go's `reflect.Kind` name of a value.
fn go_kind(v: &Value) -> &'static str {
    match v {
        Value::List(_) | Value::Bytes(_) => "slice",
        Value::Map(_) => "map",
        Value::Time(_) => "struct",
        other => other.go_type(),
    }
}

fn url_join(args: &[Value]) -> FuncResult {
    let Value::Map(dict) = &args[0] else {
        return Err(wrong_type("map[string]interface {}", &args[0]));
    };
    let userinfo = field(dict, "userinfo")?;
    let user = if userinfo.is_empty() {
        None
    } else {
        parse(&format!("proto://{userinfo}@host"))
            .map_err(|e| FuncError(format!("unable to parse userinfo in dict: {e}")))?
            .user
    };
    let url = Url {
        scheme: field(dict, "scheme")?,
        host: field(dict, "host")?.into_bytes(),
        path: field(dict, "path")?.into_bytes(),
        raw_query: field(dict, "query")?.into_bytes(),
        opaque: field(dict, "opaque")?.into_bytes(),
        fragment: field(dict, "fragment")?.into_bytes(),
        user,
        ..Url::default()
    };
    Ok(Value::String(to_string(&url)))
}
