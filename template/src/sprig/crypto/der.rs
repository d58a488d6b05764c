//! Just enough DER to move private keys between the encodings Go's `crypto/x509` reads and
//! writes (PKCS#1, SEC 1, PKCS#8): reading one element, and writing one.

pub(super) const SEQUENCE: u8 = 0x30;
pub(super) const INTEGER: u8 = 0x02;
pub(super) const OCTET_STRING: u8 = 0x04;
pub(super) const BIT_STRING: u8 = 0x03;
pub(super) const OID: u8 = 0x06;
/// `[0]` and `[1]` EXPLICIT, as SEC 1 wraps its curve and public key.
pub(super) const CONTEXT_0: u8 = 0xa0;
pub(super) const CONTEXT_1: u8 = 0xa1;

/// One element: its tag, its contents, and what follows it.
pub(super) fn read(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |acc, b| acc << 8 | usize::from(*b));
        (len, &rest[count..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The contents of an element that must have `tag`.
pub(super) fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, content, rest) = read(input)?;
    (t == tag).then_some((content, rest))
}

/// An element with the given tag around `content`.
pub(super) fn write(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}
