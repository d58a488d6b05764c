//! PEM as Go's `encoding/pem` reads and writes it, quirks included: ESO re-encodes every block
//! it keeps, so which blocks are found (and how their headers come back) is visible in the
//! output. Go 1.26 finds the first END line, then the last BEGIN line before it.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};

use super::args::text;
use crate::funcs::{FuncError, FuncResult};
use crate::value::Value;

pub const CERTIFICATE: &str = "CERTIFICATE";

/// One PEM block: its type, its `Key: value` headers and the decoded body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub kind: Vec<u8>,
    pub headers: BTreeMap<Vec<u8>, Vec<u8>>,
    pub bytes: Vec<u8>,
}

const BEGIN: &[u8] = b"-----BEGIN ";
const END: &[u8] = b"\n-----END ";
const DASHES: &[u8] = b"-----";

/// Go's standard base64 decoding: padding required, stray low bits tolerated.
const GO_STD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
        .with_decode_allow_trailing_bits(true),
);

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

/// One line without its `\n` (or `\r\n`) and trailing blanks, the rest, and how many bytes the
/// line took.
fn get_line(data: &[u8]) -> (&[u8], &[u8], usize) {
    let (mut end, next) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (i, i + 1),
        None => (data.len(), data.len()),
    };
    if end < next && end > 0 && data[end - 1] == b'\r' {
        end -= 1;
    }
    let mut line = &data[..end];
    while let [rest @ .., b' ' | b'\t'] = line {
        line = rest;
    }
    (line, &data[next..], next)
}

fn trim_space(b: &[u8]) -> &[u8] {
    match std::str::from_utf8(b) {
        Ok(s) => s.trim().as_bytes(),
        Err(_) => b.trim_ascii(),
    }
}

/// Go's `pem.Decode`: the next block and what follows it, or `None` and the whole input.
pub fn decode(data: &[u8]) -> (Option<Block>, &[u8]) {
    let mut rest = data;
    // Offsets relative to `rest`; Go's arithmetic may take them below zero, hence `isize`.
    let mut trailer: isize = 0;
    loop {
        if trailer < 0 || trailer as usize > rest.len() {
            return (None, data);
        }
        rest = &rest[trailer as usize..];
        let Some(end) = find(rest, END) else {
            return (None, data);
        };
        let mut end = end as isize;
        trailer = end + END.len() as isize;
        let Some(begin) = rfind(&rest[..end as usize], BEGIN) else {
            continue;
        };
        if begin > 0 && rest[begin - 1] != b'\n' {
            continue;
        }
        let skip = (begin + BEGIN.len()) as isize;
        rest = &rest[skip as usize..];
        end -= skip;
        trailer -= skip;

        let (type_line, after, consumed) = get_line(rest);
        rest = after;
        end -= consumed as isize;
        trailer -= consumed as isize;
        let Some(kind) = type_line.strip_suffix(DASHES) else {
            continue;
        };

        let mut headers = BTreeMap::new();
        loop {
            if rest.is_empty() {
                return (None, data);
            }
            let (line, next, consumed) = get_line(rest);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                break;
            };
            headers.insert(
                trim_space(&line[..colon]).to_vec(),
                trim_space(&line[colon + 1..]).to_vec(),
            );
            rest = next;
            end -= consumed as isize;
            trailer -= consumed as isize;
        }
        if !headers.is_empty() && end < 0 {
            continue;
        }
        if trailer < 0 || trailer as usize > rest.len() {
            continue;
        }

        let end_trailer = &rest[trailer as usize..];
        let trailer_len = kind.len() + DASHES.len();
        if end_trailer.len() < trailer_len {
            continue;
        }
        let (end_line, rest_of_end_line) = end_trailer.split_at(trailer_len);
        if !end_line.starts_with(kind) || !end_line.ends_with(DASHES) {
            continue;
        }
        if !get_line(rest_of_end_line).0.is_empty() {
            continue;
        }

        let mut bytes = Vec::new();
        if end > 0 {
            let body: Vec<u8> = rest[..end as usize]
                .iter()
                .copied()
                .filter(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
                .collect();
            match GO_STD.decode(&body) {
                Ok(b) => bytes = b,
                Err(_) => continue,
            }
        }
        // An empty body leaves `end` at -1: the END marker then starts right here.
        let after_end = (end + END.len() as isize - 1) as usize;
        let (_, rest, _) = get_line(&rest[after_end..]);
        return (
            Some(Block {
                kind: kind.to_vec(),
                headers,
                bytes,
            }),
            rest,
        );
    }
}

/// Go's `pem.Encode`: `Proc-Type` first, the other headers sorted, a blank line after them,
/// and the body in lines of 64.
pub fn encode(block: &Block) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(BEGIN);
    out.extend_from_slice(&block.kind);
    out.extend_from_slice(b"-----\n");
    if !block.headers.is_empty() {
        let proc_type = b"Proc-Type".as_slice();
        let ordered = block.headers.get_key_value(proc_type).into_iter().chain(
            block
                .headers
                .iter()
                .filter(|(k, _)| k.as_slice() != proc_type),
        );
        for (k, v) in ordered {
            out.extend_from_slice(k);
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.push(b'\n');
        }
        out.push(b'\n');
    }
    let body = STANDARD.encode(&block.bytes);
    for line in body.as_bytes().chunks(64) {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.extend_from_slice(&END[1..]);
    out.extend_from_slice(&block.kind);
    out.extend_from_slice(b"-----\n");
    out
}

/// A block of `kind` around `der`, as text.
pub fn encode_der(kind: &str, der: &[u8]) -> String {
    let block = Block {
        kind: kind.as_bytes().to_vec(),
        headers: BTreeMap::new(),
        bytes: der.to_vec(),
    };
    to_text(encode(&block))
}

/// PEM built from text input is text: every byte we add is ASCII.
pub fn to_text(pem: Vec<u8>) -> String {
    String::from_utf8(pem).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// ESO drops whatever precedes the first BEGIN marker before it looks for junk, as Go's
/// `pem.Decode` did before Go 1.26.
pub fn trim_junk(input: &[u8]) -> &[u8] {
    match find(input, b"-----BEGIN") {
        Some(i) => &input[i..],
        None => input,
    }
}

fn eq_fold(a: &[u8], b: &[u8]) -> bool {
    match (std::str::from_utf8(a), std::str::from_utf8(b)) {
        (Ok(a), Ok(b)) => a
            .chars()
            .flat_map(char::to_lowercase)
            .eq(b.chars().flat_map(char::to_lowercase)),
        _ => a.eq_ignore_ascii_case(b),
    }
}

/// `filterPEM TYPE INPUT`: the blocks of that type (compared without case), re-encoded.
pub fn filter_pem(args: &[Value]) -> FuncResult {
    let kind = text(&args[0])?.as_bytes();
    let mut data = trim_junk(text(&args[1])?.as_bytes());
    let mut out = Vec::new();
    loop {
        let (block, rest) = decode(data);
        data = rest;
        let Some(block) = block else { break };
        if eq_fold(&block.kind, kind) {
            out.extend(encode(&block));
        }
    }
    if out.is_empty() && !data.is_empty() {
        return Err(FuncError("error filtering pem: found junk".to_owned()));
    }
    Ok(Value::String(to_text(out)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eso::testutil::call;

    fn block(kind: &str, bytes: &[u8]) -> Block {
        Block {
            kind: kind.as_bytes().to_vec(),
            headers: BTreeMap::new(),
            bytes: bytes.to_vec(),
        }
    }

    #[test]
    fn decodes_what_it_encodes() {
        let mut b = block("X", &[7; 100]);
        b.headers.insert(b"Z".to_vec(), b"last".to_vec());
        b.headers
            .insert(b"Proc-Type".to_vec(), b"4,ENCRYPTED".to_vec());
        let pem = encode(&b);
        let text = String::from_utf8(pem.clone()).unwrap();
        assert!(text.starts_with("-----BEGIN X-----\nProc-Type: 4,ENCRYPTED\nZ: last\n\n"));
        assert_eq!(decode(&pem), (Some(b), &b""[..]));
    }

    // Expected outputs below were printed by Go 1.26's encoding/pem.
    #[test]
    fn go_quirks() {
        // An empty body, CRLF line ends and trailing blanks.
        let (b, rest) = decode(b"-----BEGIN A-----\r\n-----END A-----  \r\nmore");
        assert_eq!(b, Some(block("A", b"")));
        assert_eq!(rest, b"more");
        // BEGIN not at a line start is no block; the whole input comes back.
        let input = b"x-----BEGIN A-----\nAAAA\n-----END A-----\n";
        assert_eq!(decode(input), (None, &input[..]));
        // A repeated BEGIN: the last one before END wins.
        let (b, _) = decode(b"-----BEGIN A-----\n-----BEGIN B-----\nAQID\n-----END B-----\n");
        assert_eq!(b, Some(block("B", &[1, 2, 3])));
        // Bad base64 is skipped, the next block is found.
        let (b, _) = decode(
            b"-----BEGIN A-----\n!!!!\n-----END A-----\n-----BEGIN B-----\nAQID\n-----END B-----\n",
        );
        assert_eq!(b, Some(block("B", &[1, 2, 3])));
        // END of another type.
        let input = b"-----BEGIN A-----\nAQID\n-----END B-----\n";
        assert_eq!(decode(input), (None, &input[..]));
    }

    #[test]
    fn filter_pem_keeps_one_type() {
        let input = "junk\n-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n\
                     -----BEGIN PRIVATE KEY-----\nBAUG\n-----END PRIVATE KEY-----\ntail";
        assert_eq!(
            call("filterPEM", &["certificate", input]).unwrap(),
            Value::from("-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n")
        );
        assert_eq!(
            call("filterPEM", &["PRIVATE KEY", input]).unwrap(),
            Value::from("-----BEGIN PRIVATE KEY-----\nBAUG\n-----END PRIVATE KEY-----\n")
        );
        // Nothing of that type, and something left over: junk.
        assert_eq!(
            call("filterPEM", &["RSA PRIVATE KEY", input])
                .unwrap_err()
                .0,
            "error filtering pem: found junk"
        );
        // Nothing of that type and nothing left over: empty.
        let clean = "-----BEGIN A-----\nAQID\n-----END A-----\n";
        assert_eq!(call("filterPEM", &["B", clean]).unwrap(), Value::from(""));
        assert_eq!(call("filterPEM", &["B", ""]).unwrap(), Value::from(""));
        assert_eq!(
            call("filterPEM", &["B", "not pem"]).unwrap_err().0,
            "error filtering pem: found junk"
        );
    }

    /// Every arrangement of PEM fragments decodes without a panic (Go's offsets can go
    /// negative on the way).
    #[test]
    fn fragments_never_panic() {
        let parts = [
            "-----BEGIN A-----",
            "-----END A-----",
            "-----END B-----",
            "\n",
            "\r\n",
            "AQID",
            "K: v",
            " ",
            "x",
            "-----BEGIN ",
            "\n-----END ",
            "-----",
            "A",
        ];
        let mut seed = 7u64;
        for _ in 0..20_000 {
            let mut input = String::new();
            for _ in 0..(seed % 9) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                input.push_str(parts[(seed >> 33) as usize % parts.len()]);
            }
            let mut data = input.as_bytes();
            while let (Some(_), rest) = decode(data) {
                data = rest;
            }
            let _ = call("filterPEM", &["A", &input]);
            let _ = call("certSANs", &[&input]);
            let _ = call("filterCertChain", &["root", &input]);
        }
    }
}
