//! Golden cases against Go: each call's `%v` output must equal what sprig printed. The Go
//! program ran in UTC, as this machine does: `date` and `toDate` read the local zone.

use crate::sprig::go_table::{A, A::*, Expect, Expect::*, check};

#[test]
fn matches_go() {
    check(CASES);
}

// Expected outputs were printed by a Go program running these calls through sprig v3.3.0's
// function map in Go's text/template (errors are checked as errors, not by message).
const CASES: &[(&str, &[A], Expect)] = &[
    ("base", &[S("")], Out(".")),
    ("base", &[S("/")], Out("/")),
    ("base", &[S("///")], Out("/")),
    ("base", &[S("a/b/")], Out("b")),
    ("base", &[S("/a/b.txt")], Out("b.txt")),
    ("base", &[S("noslash")], Out("noslash")),
    ("dir", &[S("")], Out(".")),
    ("dir", &[S("/")], Out("/")),
    ("dir", &[S("a")], Out(".")),
    ("dir", &[S("a/b/")], Out("a/b")),
    ("dir", &[S("/a/b/c.txt")], Out("/a/b")),
    ("dir", &[S("//a//b")], Out("/a")),
    ("dir", &[S("../x")], Out("..")),
    ("clean", &[S("")], Out(".")),
    ("clean", &[S("a/../..")], Out("..")),
    ("clean", &[S("/../a/./b//c/")], Out("/a/b/c")),
    ("clean", &[S("a/b/../../../c")], Out("../c")),
    ("clean", &[S("./")], Out(".")),
    ("clean", &[S("/..")], Out("/")),
    ("ext", &[S("a.txt")], Out(".txt")),
    ("ext", &[S("a/b.tar.gz")], Out(".gz")),
    ("ext", &[S("a.b/c")], Out("")),
    ("ext", &[S("noext")], Out("")),
    ("ext", &[S(".hidden")], Out(".hidden")),
    ("ext", &[S("x.")], Out(".")),
    ("isAbs", &[S("/a")], Out("true")),
    ("isAbs", &[S("a")], Out("false")),
    ("isAbs", &[S("")], Out("false")),
    ("osBase", &[S("/a/b")], Out("b")),
    ("osDir", &[S("/a/b")], Out("/a")),
    ("osClean", &[S("a//b/../c")], Out("a/c")),
    ("osExt", &[S("f.go")], Out(".go")),
    ("osIsAbs", &[S("/x")], Out("true")),
    ("base", &[I(1)], Fails),
    (
        "urlParse",
        &[S(
            "https://user:p%40ss@example.com:8443/a%20b/c?x=1&y=2#frag%21",
        )],
        Out(
            "map[fragment:frag! host:example.com:8443 hostname:example.com opaque: path:/a b/c query:x=1&y=2 scheme:https userinfo:user:p%40ss]",
        ),
    ),
    (
        "urlParse",
        &[S("mailto:joe@example.com")],
        Out(
            "map[fragment: host: hostname: opaque:joe@example.com path: query: scheme:mailto userinfo:]",
        ),
    ),
    (
        "urlParse",
        &[S("/relative/path?q")],
        Out("map[fragment: host: hostname: opaque: path:/relative/path query:q scheme: userinfo:]"),
    ),
    (
        "urlParse",
        &[S("http://[fe80::1%25en0]:80/x")],
        Out(
            "map[fragment: host:[fe80::1%en0]:80 hostname:fe80::1%en0 opaque: path:/x query: scheme:http userinfo:]",
        ),
    ),
    (
        "urlParse",
        &[S("HTTP://Host.Com")],
        Out(
            "map[fragment: host:Host.Com hostname:Host.Com opaque: path: query: scheme:http userinfo:]",
        ),
    ),
    (
        "urlParse",
        &[S("*")],
        Out("map[fragment: host: hostname: opaque: path:* query: scheme: userinfo:]"),
    ),
    (
        "urlParse",
        &[S("a:b")],
        Out("map[fragment: host: hostname: opaque:b path: query: scheme:a userinfo:]"),
    ),
    (
        "urlParse",
        &[S("//host/p")],
        Out("map[fragment: host:host hostname:host opaque: path:/p query: scheme: userinfo:]"),
    ),
    (
        "urlParse",
        &[S("http:///p")],
        Out("map[fragment: host: hostname: opaque: path:/p query: scheme:http userinfo:]"),
    ),
    (
        "urlParse",
        &[S("http://h/p?")],
        Out("map[fragment: host:h hostname:h opaque: path:/p query: scheme:http userinfo:]"),
    ),
    (
        "urlParse",
        &[S("http://h/a%2Fb")],
        Out("map[fragment: host:h hostname:h opaque: path:/a/b query: scheme:http userinfo:]"),
    ),
    (
        "urlParse",
        &[S("http://us%65r@h")],
        Out("map[fragment: host:h hostname:h opaque: path: query: scheme:http userinfo:user]"),
    ),
    (
        "urlParse",
        &[S("")],
        Out("map[fragment: host: hostname: opaque: path: query: scheme: userinfo:]"),
    ),
    ("urlParse", &[S("http://h:port")], Fails),
    ("urlParse", &[S("1http://x")], Fails),
    ("urlParse", &[S(":foo")], Fails),
    ("urlParse", &[S("http://a b.com/")], Fails),
    ("urlParse", &[S("http://h/%zz")], Fails),
    (
        "urlParse",
        &[S("http://[::1]")],
        Out("map[fragment: host:[::1] hostname:::1 opaque: path: query: scheme:http userinfo:]"),
    ),
    ("urlParse", &[S("http://[1.2.3.4]/")], Fails),
    ("urlParse", &[S("http://x[y]/")], Fails),
    (
        "urlParse",
        &[S("postgres://h1:5432,h2:5433/db")],
        Out(
            "map[fragment: host:h1:5432,h2:5433 hostname:h1:5432,h2 opaque: path:/db query: scheme:postgres userinfo:]",
        ),
    ),
    ("urlParse", &[S("http://h1:1:2/")], Fails),
    (
        "urlParse",
        &[S("foo/bar:baz")],
        Out("map[fragment: host: hostname: opaque: path:foo/bar:baz query: scheme: userinfo:]"),
    ),
    (
        "urlParse",
        &[S("http://a@b@c/")],
        Out("map[fragment: host:c hostname:c opaque: path:/ query: scheme:http userinfo:a%40b]"),
    ),
    ("urlParse", &[S("http://a^b@c/")], Fails),
    (
        "urlParse",
        &[S("http://h/p#a b")],
        Out("map[fragment:a b host:h hostname:h opaque: path:/p query: scheme:http userinfo:]"),
    ),
    ("urlParse", &[S("http://%41/")], Fails),
    (
        "urlParse",
        &[S("http://%c3%a9/")],
        Out("map[fragment: host:é hostname:é opaque: path:/ query: scheme:http userinfo:]"),
    ),
    (
        "urlJoin",
        &[M(&[
            ("scheme", S("https")),
            ("host", S("example.com:8080")),
            ("path", S("/a b/c?d")),
            ("query", S("x=1")),
            ("fragment", S("f g!")),
            ("userinfo", S("u:p@ss")),
        ])],
        Out("https://u:p%40ss@example.com:8080/a%20b/c%3Fd?x=1#f%20g!"),
    ),
    (
        "urlJoin",
        &[M(&[
            ("scheme", S("mailto")),
            ("opaque", S("joe@example.com")),
        ])],
        Out("mailto:joe@example.com"),
    ),
    ("urlJoin", &[M(&[("path", S("a:b/c"))])], Out("./a:b/c")),
    (
        "urlJoin",
        &[M(&[("host", S("h")), ("path", S("rel"))])],
        Out("//h/rel"),
    ),
    ("urlJoin", &[M(&[])], Out("")),
    (
        "urlJoin",
        &[M(&[("scheme", S("file")), ("path", S("/etc"))])],
        Out("file:///etc"),
    ),
    (
        "urlJoin",
        &[M(&[("host", S("héllo")), ("path", S("/ü"))])],
        Out("//h%C3%A9llo/%C3%BC"),
    ),
    (
        "urlJoin",
        &[M(&[
            ("scheme", S("http")),
            ("host", S("h")),
            ("userinfo", S("user")),
        ])],
        Out("http://user@h"),
    ),
    (
        "urlJoin",
        &[M(&[("scheme", S("http")), ("host", I(5))])],
        Fails,
    ),
    (
        "urlJoin",
        &[M(&[
            ("scheme", S("http")),
            ("userinfo", S("a/b")),
            ("host", S("h")),
        ])],
        Out("http://h"),
    ),
    (
        "urlJoin",
        &[M(&[("fragment", S("#?/")), ("query", S("a b"))])],
        Out("?a b#%23?/"),
    ),
    ("urlJoin", &[M(&[("path", S("*"))])], Out("*")),
];
