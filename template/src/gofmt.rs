//! Go's `fmt` for template values: `Sprint`, `Sprintln`, `Sprintf` with Go's verbs and its
//! `%!verb(type=value)` error forms.

use crate::value::Value;

/// `fmt.Sprint(v)` (the `%v` verb): what a template prints for an action's value. Here rather
/// than beside `Value`, which is the ground both this module and the functions stand on.
impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&sprint_value(self))
    }
}

/// `fmt.Sprint(v)` of one value (`%v`).
pub fn sprint_value(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        // A nil on its own is what a template prints for a missing value; inside a container
        // Go prints the nil interface.
        Value::Nil => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Float(f) => out.push_str(&format_float_v(*f)),
        Value::String(s) => out.push_str(s),
        Value::Bytes(b) => {
            out.push('[');
            for (i, byte) in b.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(&byte.to_string());
            }
            out.push(']');
        }
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Map(map) => {
            out.push_str("map[");
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Time(t) => out.push_str(&go_time_string(t)),
    }
}

/// `%v` of a float64: the shortest digits that round-trip, in `%e` form when the decimal
/// exponent is below -4 or at least 6 (Go's `strconv.FormatFloat(f, 'g', -1, 64)`): a JSON
/// number 1000000 prints `1e+06` in ESO's templates, and so it must here.
pub fn format_float_v(f: f64) -> String {
    format_shortest(f, false)
}

/// `strconv.FormatFloat(f, 'g', -1, 64)`, or with `single` `(..., 32)`: the shortest digits
/// that read back at that precision.
pub(crate) fn format_shortest(f: f64, single: bool) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "1.2345e6".
    let sci = if single {
        format!("{:e}", f as f32)
    } else {
        format!("{f:e}")
    };
    let (mantissa, exp) = sci.split_once('e').expect("{:e} always has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}e{esign}{:02}", exp.abs());
    }
    let point = exp + 1;
    if point <= 0 {
        format!(
            "{sign}0.{}{digits}",
            "0".repeat(point.unsigned_abs() as usize)
        )
    } else if point as usize >= digits.len() {
        format!(
            "{sign}{digits}{}",
            "0".repeat(point as usize - digits.len())
        )
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{sign}{int}.{frac}")
    }
}

/// `time.Time`'s RFC 3339 with nanoseconds, trailing zeros dropped and `Z` for UTC, as its JSON
/// and YAML forms print it.
pub(crate) fn rfc3339_nano(t: &jiff::Zoned) -> String {
    let base = t.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = t.subsec_nanosecond();
    let frac = if nanos == 0 {
        String::new()
    } else {
        format!(".{nanos:09}").trim_end_matches('0').to_owned()
    };
    let offset = t.offset().seconds();
    let zone = if offset == 0 {
        "Z".to_owned()
    } else {
        t.strftime("%:z").to_string()
    };
    format!("{base}{frac}{zone}")
}

/// `time.Time.String()`: `2006-01-02 15:04:05.999999999 -0700 MST`.
fn go_time_string(t: &jiff::Zoned) -> String {
    let nanos = t.subsec_nanosecond();
    let frac = if nanos == 0 {
        String::new()
    } else {
        format!(".{nanos:09}").trim_end_matches('0').to_owned()
    };
    let offset = t.offset().seconds();
    let (osign, oabs) = if offset < 0 {
        ('-', -offset)
    } else {
        ('+', offset)
    };
    let abbreviation = t
        .time_zone()
        .to_offset_info(t.timestamp())
        .abbreviation()
        .to_string();
    format!(
        "{}{frac} {osign}{:02}{:02} {abbreviation}",
        t.strftime("%Y-%m-%d %H:%M:%S"),
        oabs / 3600,
        (oabs % 3600) / 60
    )
}

/// `fmt.Sprint(args...)`: a space between operands when neither side is a string.
pub fn sprint(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, arg) in args.iter().enumerate() {
        let is_string = matches!(arg, Value::String(_));
        if i > 0 && !is_string && !matches!(args[i - 1], Value::String(_)) {
            out.push(' ');
        }
        write_value(&mut out, arg);
    }
    out
}

/// `fmt.Sprintln(args...)`: spaces between all operands and a newline.
pub fn sprintln(args: &[Value]) -> String {
    let mut out = args.iter().map(sprint_value).collect::<Vec<_>>().join(" ");
    out.push('\n');
    out
}

/// `fmt.Sprintf(format, args...)`.
pub fn sprintf(format: &str, args: &[Value]) -> String {
    sprintf_limited(format, args, usize::MAX).unwrap_or_default()
}

/// `fmt.Sprintf`, giving up (`None`) once the result would pass `limit` bytes: a format such as
/// `%1000000d` applied to every element of a list must not build an unbounded string.
pub(crate) fn sprintf_limited(format: &str, args: &[Value], limit: usize) -> Option<String> {
    let mut p = Printer {
        buf: String::new(),
        limit,
        overflow: false,
        f: Flags::default(),
        good_arg_num: true,
        reordered: false,
    };
    p.do_printf(format, args);
    (!p.overflow).then_some(p.buf)
}

/// Go's `fmt` flags for one verb.
#[derive(Clone, Copy, Default)]
struct Flags {
    wid: usize,
    wid_present: bool,
    prec: usize,
    prec_present: bool,
    minus: bool,
    plus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    /// `%+v` and `%#v`: the flags mean something else for `v`.
    plus_v: bool,
    sharp_v: bool,
}

/// Go's limit on widths and precisions.
const TOO_LARGE: usize = 1_000_000;

const LOWER_HEX: &[u8; 17] = b"0123456789abcdefx";
const UPPER_HEX: &[u8; 17] = b"0123456789ABCDEFX";

struct Printer {
    buf: String,
    limit: usize,
    overflow: bool,
    f: Flags,
    good_arg_num: bool,
    reordered: bool,
}

/// What a `%!verb(...)` names: Go prints the type and the value with `%v`.
enum Bad<'a> {
    Nil,
    Value(&'a Value),
    /// An element of a `[]byte`.
    Byte(u8),
}

impl Printer {
    fn write(&mut self, s: &str) {
        if self.overflow || self.buf.len() + s.len() > self.limit {
            self.overflow = true;
            return;
        }
        self.buf.push_str(s);
    }

    fn write_char(&mut self, c: char) {
        self.write(c.encode_utf8(&mut [0; 4]));
    }

    fn write_padding(&mut self, n: usize) {
        if n == 0 || self.overflow {
            return;
        }
        if self.buf.len() + n > self.limit {
            self.overflow = true;
            return;
        }
        let pad = if self.f.zero && !self.f.minus {
            '0'
        } else {
            ' '
        };
        self.buf.extend(std::iter::repeat_n(pad, n));
    }

    /// Writes `s` padded to the width, counted in characters as Go counts runes.
    fn pad(&mut self, s: &str) {
        if !self.f.wid_present || self.f.wid == 0 {
            self.write(s);
            return;
        }
        let width = self.f.wid.saturating_sub(s.chars().count());
        if self.f.minus {
            self.write(s);
            self.write_padding(width);
        } else {
            self.write_padding(width);
            self.write(s);
        }
    }

    fn pad_no_zero(&mut self, s: &str) {
        let zero = std::mem::replace(&mut self.f.zero, false);
        self.pad(s);
        self.f.zero = zero;
    }

    fn do_printf(&mut self, format: &str, args: &[Value]) {
        let bytes = format.as_bytes();
        let end = bytes.len();
        let mut arg_num = 0;
        let mut i = 0;
        'verbs: while i < end {
            self.good_arg_num = true;
            let last = i;
            while i < end && bytes[i] != b'%' {
                i += 1;
            }
            if i > last {
                self.write(&format[last..i]);
            }
            if i >= end {
                break;
            }
            i += 1;
            self.f = Flags::default();
            while i < end {
                match bytes[i] {
                    b'#' => self.f.sharp = true,
                    b'0' => self.f.zero = true,
                    b'+' => self.f.plus = true,
                    b'-' => self.f.minus = true,
                    b' ' => self.f.space = true,
                    _ => break,
                }
                i += 1;
            }
            let mut after_index;
            (arg_num, i, after_index) = self.arg_number(arg_num, format, i, args.len());
            if i < end && bytes[i] == b'*' {
                i += 1;
                let (wid, present, next) = int_from_arg(args, arg_num);
                arg_num = next;
                self.f.wid_present = present;
                if !present {
                    self.write("%!(BADWIDTH)");
                }
                if wid < 0 {
                    self.f.minus = true;
                    self.f.zero = false;
                }
                self.f.wid = wid.unsigned_abs() as usize;
                after_index = false;
            } else {
                let (wid, present, next) = parse_num(bytes, i, end);
                (self.f.wid, self.f.wid_present, i) = (wid, present, next);
                if after_index && present {
                    self.good_arg_num = false;
                }
            }
            if i + 1 < end && bytes[i] == b'.' {
                i += 1;
                if after_index {
                    self.good_arg_num = false;
                }
                (arg_num, i, after_index) = self.arg_number(arg_num, format, i, args.len());
                if i < end && bytes[i] == b'*' {
                    i += 1;
                    let (prec, present, next) = int_from_arg(args, arg_num);
                    arg_num = next;
                    self.f.prec = prec.max(0) as usize;
                    self.f.prec_present = present && prec >= 0;
                    if !self.f.prec_present {
                        self.write("%!(BADPREC)");
                    }
                    after_index = false;
                } else {
                    let (prec, _, next) = parse_num(bytes, i, end);
                    (self.f.prec, self.f.prec_present, i) = (prec, true, next);
                }
            }
            if !after_index {
                (arg_num, i, _) = self.arg_number(arg_num, format, i, args.len());
            }
            if i >= end {
                self.write("%!(NOVERB)");
                break;
            }
            let verb = format[i..].chars().next().unwrap_or('?');
            i += verb.len_utf8();
            match verb {
                '%' => self.write("%"),
                _ if !self.good_arg_num => {
                    self.write("%!");
                    self.write_char(verb);
                    self.write("(BADINDEX)");
                }
                _ if arg_num >= args.len() => {
                    self.write("%!");
                    self.write_char(verb);
                    self.write("(MISSING)");
                }
                _ => {
                    if verb == 'v' || verb == 'w' {
                        self.f.sharp_v = self.f.sharp;
                        self.f.sharp = false;
                        self.f.plus_v = self.f.plus;
                        self.f.plus = false;
                    }
                    self.print_arg(&args[arg_num], verb);
                    arg_num += 1;
                    continue 'verbs;
                }
            }
        }
        if !self.reordered && arg_num < args.len() {
            self.f = Flags::default();
            self.write("%!(EXTRA ");
            for (i, arg) in args[arg_num..].iter().enumerate() {
                if i > 0 {
                    self.write(", ");
                }
                if matches!(arg, Value::Nil) {
                    self.write("<nil>");
                } else {
                    self.write(arg.go_type());
                    self.write("=");
                    self.print_arg(arg, 'v');
                }
            }
            self.write(")");
        }
    }

    /// An explicit argument index `[n]` at `i`, if any.
    fn arg_number(
        &mut self,
        arg_num: usize,
        format: &str,
        i: usize,
        num_args: usize,
    ) -> (usize, usize, bool) {
        let bytes = format.as_bytes();
        if i >= bytes.len() || bytes[i] != b'[' {
            return (arg_num, i, false);
        }
        self.reordered = true;
        let (index, width, ok) = parse_arg_number(&bytes[i..]);
        if ok && index < num_args {
            return (index, i + width, true);
        }
        self.good_arg_num = false;
        (arg_num, i + width, ok)
    }

    fn bad_verb(&mut self, verb: char, bad: Bad<'_>) {
        self.write("%!");
        self.write_char(verb);
        self.write("(");
        match bad {
            Bad::Nil => self.write("<nil>"),
            Bad::Value(v) => {
                self.write(v.go_type());
                self.write("=");
                self.print_value(v, 'v');
            }
            Bad::Byte(b) => {
                self.write("uint8=");
                self.fmt_int(u64::from(b), 10, false, 'v', LOWER_HEX);
            }
        }
        self.write(")");
    }

    fn print_arg(&mut self, arg: &Value, verb: char) {
        match (arg, verb) {
            (Value::Nil, 'T' | 'v') => self.pad("<nil>"),
            (Value::Nil, _) => self.bad_verb(verb, Bad::Nil),
            (_, 'T') => self.fmt_s(arg.go_type()),
            // No addresses here: Go's %p of a map or slice prints one, which no template needs.
            (_, 'p' | 'w') => self.bad_verb(verb, Bad::Value(arg)),
            _ => self.print_value(arg, verb),
        }
    }

    fn print_value(&mut self, v: &Value, verb: char) {
        if self.overflow {
            return;
        }
        match v {
            // Inside a container a nil is an empty interface: Go prints it for any verb.
            Value::Nil if self.f.sharp_v => self.write("interface {}(nil)"),
            Value::Nil => self.write("<nil>"),
            Value::Bool(b) => match verb {
                't' | 'v' => self.pad(if *b { "true" } else { "false" }),
                _ => self.bad_verb(verb, Bad::Value(v)),
            },
            Value::Int(i) => self.fmt_integer(*i as u64, true, verb, v),
            Value::Float(f) => self.fmt_float(*f, verb, v),
            Value::String(s) => self.fmt_string(s, verb, v),
            Value::Bytes(b) => self.fmt_bytes(b, verb, "[]byte"),
            Value::List(items) => {
                if self.f.sharp_v {
                    self.write("[]interface {}{");
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            self.write(", ");
                        }
                        self.print_element(item, verb);
                    }
                    self.write("}");
                } else {
                    self.write("[");
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            self.write(" ");
                        }
                        self.print_element(item, verb);
                    }
                    self.write("]");
                }
            }
            Value::Map(map) => {
                self.write(if self.f.sharp_v {
                    "map[string]interface {}{"
                } else {
                    "map["
                });
                for (i, (k, item)) in map.iter().enumerate() {
                    if i > 0 {
                        self.write(if self.f.sharp_v { ", " } else { " " });
                    }
                    self.fmt_string(k, verb, &Value::String(k.clone()));
                    self.write(":");
                    self.print_element(item, verb);
                }
                self.write(if self.f.sharp_v { "}" } else { "]" });
            }
            Value::Time(t) => {
                if self.f.sharp_v {
                    let s = go_time_go_string(t);
                    self.fmt_s(&s);
                } else if matches!(verb, 'v' | 's' | 'x' | 'X' | 'q') {
                    let s = go_time_string(t);
                    self.fmt_string(&s, verb, v);
                } else {
                    self.bad_verb(verb, Bad::Value(v));
                }
            }
        }
    }

    fn print_element(&mut self, v: &Value, verb: char) {
        match v {
            // A []byte inside a container is a []uint8 to Go's reflection.
            Value::Bytes(b) if matches!(verb, 's' | 'q' | 'x' | 'X') => {
                self.fmt_bytes(b, verb, "[]uint8")
            }
            Value::Bytes(b) => self.fmt_byte_slice(b, verb, "[]uint8"),
            _ => self.print_value(v, verb),
        }
    }

    fn fmt_integer(&mut self, u: u64, signed: bool, verb: char, v: &Value) {
        match verb {
            'v' if self.f.sharp_v && !signed => self.fmt_0x64(u, true),
            'v' | 'd' => self.fmt_int(u, 10, signed, verb, LOWER_HEX),
            'b' => self.fmt_int(u, 2, signed, verb, LOWER_HEX),
            'o' | 'O' => self.fmt_int(u, 8, signed, verb, LOWER_HEX),
            'x' => self.fmt_int(u, 16, signed, verb, LOWER_HEX),
            'X' => self.fmt_int(u, 16, signed, verb, UPPER_HEX),
            'c' => {
                let c = rune_of(u);
                self.pad(c.encode_utf8(&mut [0; 4]));
            }
            'q' => {
                let c = rune_of(u);
                let quoted = quote_rune(c, self.f.plus);
                self.pad(&quoted);
            }
            'U' => self.fmt_unicode(u),
            _ => self.bad_verb(verb, Bad::Value(v)),
        }
    }

    fn fmt_0x64(&mut self, u: u64, leading_0x: bool) {
        let sharp = std::mem::replace(&mut self.f.sharp, leading_0x);
        self.fmt_int(u, 16, false, 'v', LOWER_HEX);
        self.f.sharp = sharp;
    }

    /// Go's `fmt.fmtInteger`.
    fn fmt_int(&mut self, mut u: u64, base: u64, signed: bool, verb: char, digits: &[u8; 17]) {
        let negative = signed && (u as i64) < 0;
        if negative {
            u = u.wrapping_neg();
        }
        let mut prec: isize = 0;
        if self.f.prec_present {
            prec = self.f.prec as isize;
            if prec == 0 && u == 0 {
                let zero = std::mem::replace(&mut self.f.zero, false);
                self.write_padding(self.f.wid);
                self.f.zero = zero;
                return;
            }
        } else if self.f.zero && !self.f.minus && self.f.wid_present {
            prec = self.f.wid as isize;
            if negative || self.f.plus || self.f.space {
                prec -= 1;
            }
        }
        // Built backwards, as Go does.
        let mut out: Vec<u8> = Vec::new();
        loop {
            out.push(digits[(u % base) as usize]);
            u /= base;
            if u == 0 {
                break;
            }
        }
        while (out.len() as isize) < prec {
            out.push(b'0');
        }
        if self.f.sharp {
            match base {
                2 => out.extend_from_slice(b"b0"),
                8 if out.last() != Some(&b'0') => out.push(b'0'),
                16 => {
                    out.push(digits[16]);
                    out.push(b'0');
                }
                _ => {}
            }
        }
        if verb == 'O' {
            out.extend_from_slice(b"o0");
        }
        if negative {
            out.push(b'-');
        } else if self.f.plus {
            out.push(b'+');
        } else if self.f.space {
            out.push(b' ');
        }
        out.reverse();
        let s = String::from_utf8_lossy(&out).into_owned();
        self.pad_no_zero(&s);
    }

    fn fmt_unicode(&mut self, u: u64) {
        let prec = if self.f.prec_present && self.f.prec > 4 {
            self.f.prec
        } else {
            4
        };
        let mut s = format!("U+{u:0prec$X}");
        if self.f.sharp
            && let Some(c) = u32::try_from(u).ok().and_then(char::from_u32)
            && is_print(c)
        {
            s.push_str(&format!(" '{c}'"));
        }
        self.pad_no_zero(&s);
    }

    fn fmt_float(&mut self, v: f64, verb: char, value: &Value) {
        match verb {
            'v' => self.fmt_float_as(v, 'g', -1),
            'b' | 'g' | 'G' | 'x' | 'X' => self.fmt_float_as(v, verb, -1),
            'f' | 'e' | 'E' => self.fmt_float_as(v, verb, 6),
            'F' => self.fmt_float_as(v, 'f', 6),
            _ => self.bad_verb(verb, Bad::Value(value)),
        }
    }

    /// Go's `fmt.fmtFloat`: strconv's digits, then the sign, `#` and padding rules.
    fn fmt_float_as(&mut self, v: f64, verb: char, default_prec: i32) {
        let prec = if self.f.prec_present {
            i32::try_from(self.f.prec).unwrap_or(i32::MAX)
        } else {
            default_prec
        };
        let formatted = format_float(v, verb, prec);
        let mut num = if formatted.starts_with(['-', '+']) {
            formatted
        } else {
            format!("+{formatted}")
        };
        if self.f.space && num.starts_with('+') && !self.f.plus {
            num.replace_range(0..1, " ");
        }
        if num[1..].starts_with(['I', 'N']) {
            if num[1..].starts_with('N') && !self.f.space && !self.f.plus {
                num.remove(0);
            }
            self.pad_no_zero(&num);
            return;
        }
        if self.f.sharp && verb != 'b' {
            num = sharp_float(&num, verb, prec);
        }
        if self.f.plus || !num.starts_with('+') {
            if self.f.zero && !self.f.minus && self.f.wid_present && self.f.wid > num.len() {
                let (sign, rest) = num.split_at(1);
                let pad = self.f.wid - num.len();
                self.write(sign);
                self.write_padding(pad);
                self.write(rest);
                return;
            }
            self.pad(&num);
            return;
        }
        self.pad(&num[1..]);
    }

    fn fmt_string(&mut self, s: &str, verb: char, v: &Value) {
        match verb {
            'v' if self.f.sharp_v => self.fmt_q(s),
            'v' | 's' => self.fmt_s(s),
            'x' => self.fmt_sbx(s.as_bytes(), LOWER_HEX),
            'X' => self.fmt_sbx(s.as_bytes(), UPPER_HEX),
            'q' => self.fmt_q(s),
            _ => self.bad_verb(verb, Bad::Value(v)),
        }
    }

    fn truncate<'s>(&self, s: &'s str) -> &'s str {
        if self.f.prec_present
            && let Some((i, _)) = s.char_indices().nth(self.f.prec)
        {
            return &s[..i];
        }
        s
    }

    fn fmt_s(&mut self, s: &str) {
        let s = self.truncate(s);
        self.pad(s);
    }

    fn fmt_q(&mut self, s: &str) {
        let s = self.truncate(s);
        if self.f.sharp && can_backquote(s) {
            self.pad(&format!("`{s}`"));
        } else if self.f.plus {
            self.pad(&quote_ascii(s));
        } else {
            self.pad(&quote(s));
        }
    }

    /// `%x` of a string or bytes: hex, with `#` prefixes and ` ` separators as Go does.
    fn fmt_sbx(&mut self, b: &[u8], digits: &[u8; 17]) {
        let mut length = b.len();
        if self.f.prec_present && self.f.prec < length {
            length = self.f.prec;
        }
        let mut width = 2 * length;
        if width == 0 {
            if self.f.wid_present {
                self.write_padding(self.f.wid);
            }
            return;
        }
        if self.f.space {
            if self.f.sharp {
                width *= 2;
            }
            width += length - 1;
        } else if self.f.sharp {
            width += 2;
        }
        if self.f.wid_present && self.f.wid > width && !self.f.minus {
            self.write_padding(self.f.wid - width);
        }
        let mut out = String::with_capacity(width);
        if self.f.sharp {
            out.push('0');
            out.push(char::from(digits[16]));
        }
        for (i, &c) in b[..length].iter().enumerate() {
            if self.f.space && i > 0 {
                out.push(' ');
                if self.f.sharp {
                    out.push('0');
                    out.push(char::from(digits[16]));
                }
            }
            out.push(char::from(digits[usize::from(c >> 4)]));
            out.push(char::from(digits[usize::from(c & 0xf)]));
        }
        self.write(&out);
        if self.f.wid_present && self.f.wid > width && self.f.minus {
            self.write_padding(self.f.wid - width);
        }
    }

    fn fmt_bytes(&mut self, b: &[u8], verb: char, type_name: &str) {
        match verb {
            's' => {
                let s = String::from_utf8_lossy(b);
                self.fmt_s(&s);
            }
            'x' => self.fmt_sbx(b, LOWER_HEX),
            'X' => self.fmt_sbx(b, UPPER_HEX),
            'q' => {
                let s = self.truncate_bytes(b);
                if self.f.sharp
                    && let Ok(text) = std::str::from_utf8(s)
                    && can_backquote(text)
                {
                    self.pad(&format!("`{text}`"));
                } else {
                    let quoted = quote_bytes(s, self.f.plus);
                    self.pad(&quoted);
                }
            }
            _ => self.fmt_byte_slice(b, verb, type_name),
        }
    }

    fn truncate_bytes<'s>(&self, b: &'s [u8]) -> &'s [u8] {
        if !self.f.prec_present {
            return b;
        }
        let mut end = 0;
        for _ in 0..self.f.prec {
            if end >= b.len() {
                break;
            }
            end += utf8_width(&b[end..]);
        }
        &b[..end]
    }

    /// A byte slice printed element by element.
    fn fmt_byte_slice(&mut self, b: &[u8], verb: char, type_name: &str) {
        if self.f.sharp_v && matches!(verb, 'v' | 'd') {
            self.write(type_name);
            self.write("{");
            for (i, &c) in b.iter().enumerate() {
                if i > 0 {
                    self.write(", ");
                }
                self.fmt_0x64(u64::from(c), true);
            }
            self.write("}");
            return;
        }
        self.write("[");
        for (i, &c) in b.iter().enumerate() {
            if i > 0 {
                self.write(" ");
            }
            match verb {
                'v' | 'd' => self.fmt_int(u64::from(c), 10, false, verb, LOWER_HEX),
                'b' | 'o' | 'O' | 'x' | 'X' | 'c' | 'q' | 'U' => {
                    self.fmt_integer(u64::from(c), false, verb, &Value::Int(i64::from(c)))
                }
                _ => self.bad_verb(verb, Bad::Byte(c)),
            }
        }
        self.write("]");
    }
}

fn rune_of(u: u64) -> char {
    u32::try_from(u)
        .ok()
        .and_then(char::from_u32)
        .unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// Length of the UTF-8 sequence at the start of `b`, 1 for an invalid byte (Go's rune count).
fn utf8_width(b: &[u8]) -> usize {
    for n in (1..=4.min(b.len())).rev() {
        if let Ok(s) = std::str::from_utf8(&b[..n])
            && s.chars().count() == 1
        {
            return n;
        }
    }
    1
}

fn parse_num(bytes: &[u8], start: usize, end: usize) -> (usize, bool, usize) {
    let mut num = 0usize;
    let mut present = false;
    let mut i = start;
    while i < end && bytes[i].is_ascii_digit() {
        if num > TOO_LARGE {
            return (0, false, end);
        }
        num = num * 10 + usize::from(bytes[i] - b'0');
        present = true;
        i += 1;
    }
    (num, present, i)
}

/// `[n]` at the start of `bytes`: the zero-based index, the bytes it takes, and whether it
/// parsed.
fn parse_arg_number(bytes: &[u8]) -> (usize, usize, bool) {
    if bytes.len() < 3 {
        return (0, 1, false);
    }
    for i in 1..bytes.len() {
        if bytes[i] == b']' {
            let (width, ok, next) = parse_num(bytes, 1, i);
            if !ok || next != i || width == 0 {
                // Go's index 0 becomes -1 and fails the range check the same way.
                return (usize::MAX, i + 1, ok && next == i);
            }
            return (width - 1, i + 1, true);
        }
    }
    (0, 1, false)
}

/// A `*` width or precision: the argument must be an int.
fn int_from_arg(args: &[Value], arg_num: usize) -> (i64, bool, usize) {
    let Some(arg) = args.get(arg_num) else {
        return (0, false, arg_num);
    };
    match arg {
        Value::Int(n) if n.unsigned_abs() <= TOO_LARGE as u64 => (*n, true, arg_num + 1),
        _ => (0, false, arg_num + 1),
    }
}

/// Go's `#` rule for floats: keep the decimal point, and for `%g` the trailing zeros.
fn sharp_float(num: &str, verb: char, prec: i32) -> String {
    let mut digits: i32 = match verb {
        'v' | 'g' | 'G' | 'x' => {
            if prec == -1 {
                6
            } else {
                prec
            }
        }
        _ => 0,
    };
    let bytes = num.as_bytes();
    let mut body = num.to_owned();
    let mut tail = String::new();
    let mut has_point = false;
    let mut saw_nonzero = false;
    for (i, &c) in bytes.iter().enumerate().skip(1) {
        match c {
            b'.' => has_point = true,
            b'p' | b'P' => {
                tail = num[i..].to_owned();
                body = num[..i].to_owned();
                break;
            }
            b'e' | b'E' if verb != 'x' && verb != 'X' => {
                tail = num[i..].to_owned();
                body = num[..i].to_owned();
                break;
            }
            _ => {
                if c != b'0' {
                    saw_nonzero = true;
                }
                if saw_nonzero {
                    digits -= 1;
                }
            }
        }
    }
    if !has_point {
        if body.len() == 2 && body.ends_with('0') {
            digits -= 1;
        }
        body.push('.');
    }
    while digits > 0 {
        body.push('0');
        digits -= 1;
    }
    body + &tail
}

/// Go's `strconv.FormatFloat(v, fmt, prec, 64)`.
fn format_float(v: f64, fmt: char, prec: i32) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let neg = v.is_sign_negative();
    let sign = if neg { "-" } else { "" };
    match fmt {
        'b' => {
            let bits = v.to_bits();
            let raw_exp = ((bits >> 52) & 0x7ff) as i64;
            let mut mant = bits & ((1u64 << 52) - 1);
            let exp = if raw_exp == 0 {
                1
            } else {
                mant |= 1 << 52;
                raw_exp
            } - 1023
                - 52;
            let esign = if exp >= 0 { "+" } else { "" };
            format!("{sign}{mant}p{esign}{exp}")
        }
        'x' | 'X' => format_hex_float(v, fmt, prec),
        'f' if prec >= 0 => format!("{sign}{:.*}", prec as usize, v.abs()),
        _ => {
            let shortest = prec < 0;
            let prec = if matches!(fmt, 'g' | 'G') && prec == 0 {
                1
            } else {
                prec
            };
            let digits = decimal_digits(v.abs(), fmt, prec);
            format_digits(sign, shortest, &digits, prec, fmt)
        }
    }
}

/// The decimal digits of `v` (no trailing zeros) and the position of the decimal point.
struct Digits {
    d: Vec<u8>,
    dp: i32,
}

fn decimal_digits(v: f64, fmt: char, prec: i32) -> Digits {
    if v == 0.0 {
        return Digits {
            d: Vec::new(),
            dp: 0,
        };
    }
    let sci = if prec < 0 {
        format!("{v:e}")
    } else {
        let significant = match fmt {
            'e' | 'E' => prec + 1,
            _ => prec.max(1),
        };
        format!("{v:.*e}", (significant - 1) as usize)
    };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut d: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    while d.last() == Some(&b'0') {
        d.pop();
    }
    Digits { d, dp: exp + 1 }
}

/// Go's `strconv` `formatDigits` for `e`, `E`, `f`, `g` and `G`.
fn format_digits(sign: &str, shortest: bool, digs: &Digits, prec: i32, fmt: char) -> String {
    let nd = digs.d.len() as i32;
    let mut prec = prec;
    if shortest {
        prec = match fmt {
            'e' | 'E' => (nd - 1).max(0),
            'f' => (nd - digs.dp).max(0),
            _ => nd,
        };
    }
    match fmt {
        'e' | 'E' => fmt_e(sign, digs, prec, fmt),
        'f' => fmt_f(sign, digs, prec),
        _ => {
            let mut eprec = prec;
            if eprec > nd && nd >= digs.dp {
                eprec = nd;
            }
            if shortest {
                eprec = 6;
            }
            let exp = digs.dp - 1;
            if exp < -4 || exp >= eprec {
                if prec > nd {
                    prec = nd;
                }
                let e = if fmt == 'G' { 'E' } else { 'e' };
                return fmt_e(sign, digs, prec - 1, e);
            }
            if prec > digs.dp {
                prec = nd;
            }
            fmt_f(sign, digs, (prec - digs.dp).max(0))
        }
    }
}

fn fmt_e(sign: &str, digs: &Digits, prec: i32, e: char) -> String {
    let mut out = String::from(sign);
    out.push(char::from(digs.d.first().copied().unwrap_or(b'0')));
    if prec > 0 {
        out.push('.');
        for i in 1..=prec as usize {
            out.push(char::from(digs.d.get(i).copied().unwrap_or(b'0')));
        }
    }
    out.push(e);
    let exp = if digs.d.is_empty() { 0 } else { digs.dp - 1 };
    out.push(if exp < 0 { '-' } else { '+' });
    out.push_str(&format!("{:02}", exp.abs()));
    out
}

fn fmt_f(sign: &str, digs: &Digits, prec: i32) -> String {
    let mut out = String::from(sign);
    if digs.dp > 0 {
        for i in 0..digs.dp as usize {
            out.push(char::from(digs.d.get(i).copied().unwrap_or(b'0')));
        }
    } else {
        out.push('0');
    }
    if prec > 0 {
        out.push('.');
        for i in 0..prec {
            let j = digs.dp + i;
            let c = if j >= 0 {
                digs.d.get(j as usize).copied()
            } else {
                None
            };
            out.push(char::from(c.unwrap_or(b'0')));
        }
    }
    out
}

/// Go's `%x` of a float: `-0x1.yyyyp±dd`.
fn format_hex_float(v: f64, fmt: char, prec: i32) -> String {
    let bits = v.to_bits();
    let neg = bits >> 63 != 0;
    let raw_exp = ((bits >> 52) & 0x7ff) as i32;
    let mut mant = bits & ((1u64 << 52) - 1);
    let mut exp = if raw_exp == 0 {
        1
    } else {
        mant |= 1 << 52;
        raw_exp
    } - 1023;
    if mant == 0 {
        exp = 0;
    }
    mant <<= 60 - 52;
    while mant != 0 && mant & (1 << 60) == 0 {
        mant <<= 1;
        exp -= 1;
    }
    if (0..15).contains(&prec) {
        let shift = (prec * 4) as u32;
        let extra = (mant << shift) & ((1 << 60) - 1);
        mant >>= 60 - shift;
        if extra | (mant & 1) > 1 << 59 {
            mant += 1;
        }
        mant <<= 60 - shift;
        if mant & (1 << 61) != 0 {
            mant >>= 1;
            exp += 1;
        }
    }
    let hex = if fmt == 'X' { UPPER_HEX } else { LOWER_HEX };
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    out.push('0');
    out.push(fmt);
    out.push(char::from(b'0' + ((mant >> 60) & 1) as u8));
    mant <<= 4;
    if prec < 0 && mant != 0 {
        out.push('.');
        while mant != 0 {
            out.push(char::from(hex[((mant >> 60) & 15) as usize]));
            mant <<= 4;
        }
    } else if prec > 0 {
        out.push('.');
        for _ in 0..prec {
            out.push(char::from(hex[((mant >> 60) & 15) as usize]));
            mant <<= 4;
        }
    }
    out.push(if fmt == 'X' { 'P' } else { 'p' });
    out.push(if exp < 0 { '-' } else { '+' });
    out.push_str(&format!("{:02}", exp.abs()));
    out
}

/// Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols and the ASCII space.
pub(crate) fn is_print(c: char) -> bool {
    use unicode_general_category::{GeneralCategory as G, get_general_category};
    if c == ' ' {
        return true;
    }
    !matches!(
        get_general_category(c),
        G::Control
            | G::Format
            | G::Surrogate
            | G::PrivateUse
            | G::Unassigned
            | G::SpaceSeparator
            | G::LineSeparator
            | G::ParagraphSeparator
    )
}

/// Go's `strconv.Quote`.
pub(crate) fn quote(s: &str) -> String {
    quote_with(s, '"', false)
}

/// Go's `strconv.QuoteToASCII`.
fn quote_ascii(s: &str) -> String {
    quote_with(s, '"', true)
}

fn quote_with(s: &str, quote: char, ascii_only: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        escape_rune(&mut out, c, quote, ascii_only);
    }
    out.push(quote);
    out
}

/// `strconv.Quote` of bytes that may not be UTF-8: each invalid byte is `\xNN`.
fn quote_bytes(b: &[u8], ascii_only: bool) -> String {
    let mut out = String::from("\"");
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            escape_rune(&mut out, c, '"', ascii_only);
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out.push('"');
    out
}

fn quote_rune(c: char, ascii_only: bool) -> String {
    let mut out = String::from("'");
    escape_rune(&mut out, c, '\'', ascii_only);
    out.push('\'');
    out
}

fn escape_rune(out: &mut String, c: char, quote: char, ascii_only: bool) {
    if c == quote || c == '\\' {
        out.push('\\');
        out.push(c);
        return;
    }
    if is_print(c) && (!ascii_only || c.is_ascii()) {
        out.push(c);
        return;
    }
    match c {
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{b}' => out.push_str("\\v"),
        _ if c < ' ' || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
        _ if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
        _ => out.push_str(&format!("\\U{:08x}", c as u32)),
    }
}

/// Go's `strconv.CanBackquote`.
fn can_backquote(s: &str) -> bool {
    s.chars()
        .all(|c| c != '\u{feff}' && c != '`' && c != '\u{7f}' && (c >= ' ' || c == '\t'))
}

/// Go's `time.Month` and `time.Weekday` names (Sunday first).
pub(crate) const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
pub(crate) const DAY_NAMES: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// `time.Time.GoString()`.
fn go_time_go_string(t: &jiff::Zoned) -> String {
    let month = MONTH_NAMES[(t.month() as usize).clamp(1, 12) - 1];
    let location = match t.time_zone().iana_name() {
        Some("UTC") | Some("Etc/UTC") => "time.UTC".to_owned(),
        Some(name) => format!("time.Location({})", quote(name)),
        None if t.offset().seconds() == 0 => "time.UTC".to_owned(),
        None => "time.Location(\"\")".to_owned(),
    };
    format!(
        "time.Date({}, time.{month}, {}, {}, {}, {}, {}, {location})",
        t.year(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.subsec_nanosecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_go_prints_them() {
        for (f, go) in [
            (5432.0, "5432"),
            (1e6, "1e+06"),
            (123456789.0, "1.23456789e+08"),
            (100000.0, "100000"),
            (0.5, "0.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (1e21, "1e+21"),
            (1e20, "1e+20"),
            (1234567.0, "1.234567e+06"),
            (999999.0, "999999"),
        ] {
            assert_eq!(format_float_v(f), go, "{f}");
        }
    }

    #[test]
    fn containers_print_as_go_prints_them() {
        let v = Value::List(vec![Value::from("a"), Value::Int(1), Value::Nil]);
        assert_eq!(sprint_value(&v), "[a 1 <nil>]");
        assert_eq!(
            sprint(&[
                Value::Int(1),
                Value::Int(2),
                Value::from("x"),
                Value::Int(3)
            ]),
            "1 2x3"
        );
    }
    #[test]
    fn sprintf_formats_as_go() {
        let args = [
            Value::Int(i64::MIN),
            Value::from("é"),
            Value::Float(-0.0),
            Value::Bool(true),
        ];
        assert_eq!(
            sprintf("%d|%5.1s|%v|%t", &args),
            "-9223372036854775808|    é|-0|true"
        );
        assert_eq!(sprintf("%d %d", &[Value::Int(1)]), "1 %!d(MISSING)");
        assert_eq!(sprintf("", &[Value::Int(1)]), "%!(EXTRA int=1)");
        assert_eq!(
            sprintf("%[2]s%[1]s", &[Value::from("a"), Value::from("b")]),
            "ba"
        );
        assert_eq!(sprintf("%x", &[Value::Bytes(vec![0xde, 0xad])]), "dead");
        assert_eq!(
            sprintf("%q", &[Value::Bytes(vec![b'a', 0xff])]),
            "\"a\\xff\""
        );
        assert_eq!(sprintf_limited("%5d", &[Value::Int(1)], 4), None);
    }

    #[test]
    fn quote_follows_strconv() {
        assert_eq!(
            quote("a\"\\\n\t\u{7}\u{7f}é\u{ad}\u{1F600}\u{e000}"),
            "\"a\\\"\\\\\\n\\t\\a\\x7fé\\u00ad😀\\ue000\""
        );
        assert_eq!(quote_ascii("é😀"), "\"\\u00e9\\U0001f600\"");
    }
}
