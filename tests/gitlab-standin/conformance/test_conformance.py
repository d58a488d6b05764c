"""GitLab CI/CD variables conformance, driven by python-gitlab (a real GitLab client).

Runs against whatever GITLAB_URL points at: the stand-in (tests/conformance.rs starts it and
runs this) or a real GitLab, so that the stand-in and GitLab can be held to the same test.

Environment:
  GITLAB_URL             base URL, e.g. http://127.0.0.1:8080 or https://gitlab.example.com
  GITLAB_TOKEN           a token with Maintainer on GITLAB_PROJECT and Owner on GITLAB_GROUP
                         (scope `api`)
  GITLAB_PROJECT         full path of a throwaway project, e.g. acme/platform/app
  GITLAB_GROUP           full path of a throwaway group, e.g. acme/platform
  GITLAB_LOW_TOKEN       optional: a token with only Developer on GITLAB_PROJECT (for the 403
                         case; skipped without it)

Plain script (no pytest needed); it is also pytest-compatible. Every variable it creates has a
key starting with a random prefix and is deleted at the end, even on failure.
"""

import os
import secrets
import sys
import traceback

import gitlab
from gitlab import exceptions as glexc

URL = os.environ["GITLAB_URL"]
TOKEN = os.environ["GITLAB_TOKEN"]
PROJECT = os.environ["GITLAB_PROJECT"]
GROUP = os.environ["GITLAB_GROUP"]
LOW_TOKEN = os.environ.get("GITLAB_LOW_TOKEN")

PREFIX = "ESO_CONF_" + secrets.token_hex(4).upper() + "_"

# Retries off: a failure must show the first answer, not a retried one.
gl = gitlab.Gitlab(URL, private_token=TOKEN, retry_transient_errors=False)


class Skipped(Exception):
    pass


def project():
    return gl.projects.get(PROJECT)


def group():
    return gl.groups.get(GROUP, lazy=True)


def expect_error(exc_type, code, fn, contains=None):
    try:
        fn()
    except exc_type as e:
        assert e.response_code == code, f"expected {code}, got {e.response_code}: {e.error_message}"
        if contains is not None:
            assert contains in str(e.error_message), f"{contains!r} not in {e.error_message!r}"
        return e
    raise AssertionError(f"expected {exc_type.__name__} {code}, got no error")


def test_auth_and_project_lookup():
    gl.auth()
    assert gl.user.username
    p = project()
    assert p.path_with_namespace.lower() == PROJECT.lower()
    # The numeric id and the encoded path name the same project.
    assert gl.projects.get(p.id).id == p.id


def test_project_variable_crud():
    p = project()
    key = PREFIX + "CRUD"
    created = p.variables.create({"key": key, "value": "first", "description": "conformance"})
    assert created.key == key and created.value == "first"
    assert created.environment_scope == "*" and created.variable_type == "env_var"
    assert created.masked is False and created.protected is False and created.raw is False
    got = p.variables.get(key)
    assert got.value == "first" and got.description == "conformance"
    got.value = "second"
    got.save()
    assert p.variables.get(key).value == "second"
    p.variables.update(key, {"value": "third", "protected": True})
    again = p.variables.get(key)
    assert again.value == "third" and again.protected is True
    p.variables.delete(key)
    expect_error(glexc.GitlabGetError, 404, lambda: p.variables.get(key), "404 Variable Not Found")


def test_project_pagination():
    p = project()
    keys = [f"{PREFIX}PAGE_{i:02}" for i in range(25)]
    for k in keys:
        p.variables.create({"key": k, "value": "v"})
    everything = [v.key for v in p.variables.list(get_all=True)]
    assert set(keys) <= set(everything), "get_all=True misses variables"
    walked = [v.key for v in p.variables.list(iterator=True, per_page=7)]
    assert set(keys) <= set(walked), "the iterator misses variables"
    assert len(walked) == len(set(walked)), "the iterator repeats variables"
    page = p.variables.list(iterator=True, per_page=10)
    assert page.per_page == 10 and page.current_page == 1
    assert page.total == len(everything) and page.total_pages == -(-len(everything) // 10)
    second = p.variables.list(page=2, per_page=10)
    assert len(second) == 10


def test_environment_scope_filter_and_409():
    p = project()
    key = PREFIX + "SCOPED"
    p.variables.create({"key": key, "value": "everywhere"})
    p.variables.create({"key": key, "value": "only-prod", "environment_scope": "production"})
    expect_error(glexc.GitlabGetError, 409, lambda: p.variables.get(key), "filter[environment_scope]")
    prod = p.variables.get(key, filter={"environment_scope": "production"})
    assert prod.value == "only-prod" and prod.environment_scope == "production"
    star = p.variables.get(key, filter={"environment_scope": "*"})
    assert star.value == "everywhere"
    expect_error(glexc.GitlabGetError, 404,
                 lambda: p.variables.get(key, filter={"environment_scope": "prod*"}))
    expect_error(glexc.GitlabUpdateError, 409, lambda: p.variables.update(key, {"value": "x"}))
    p.variables.update(key, {"value": "prod-2"}, filter={"environment_scope": "production"})
    assert p.variables.get(key, filter={"environment_scope": "production"}).value == "prod-2"
    expect_error(glexc.GitlabDeleteError, 409, lambda: p.variables.delete(key))
    p.variables.delete(key, filter={"environment_scope": "production"})
    assert p.variables.get(key).value == "everywhere"
    p.variables.delete(key)


def test_group_variable_crud_and_list():
    g = group()
    key = PREFIX + "GROUP"
    created = g.variables.create({"key": key, "value": "group-value", "environment_scope": "*"})
    assert created.value == "group-value"
    assert g.variables.get(key).value == "group-value"
    assert key in [v.key for v in g.variables.list(get_all=True)]
    g.variables.update(key, {"value": "group-2"})
    assert g.variables.get(key).value == "group-2"
    g.variables.delete(key)
    expect_error(glexc.GitlabGetError, 404, lambda: g.variables.get(key), "404 GroupVariable Not Found")


def test_hidden_variable_value_is_never_returned():
    p = project()
    key = PREFIX + "HIDDEN"
    created = p.variables.create({"key": key, "value": "hidden-value-123", "masked_and_hidden": True})
    assert created.value is None and created.hidden is True and created.masked is True
    assert p.variables.get(key).value is None
    listed = [v for v in p.variables.list(get_all=True) if v.key == key]
    assert listed and listed[0].value is None


def test_project_ancestor_groups():
    p = project()
    paths = [g.full_path for g in p.groups.list(get_all=True)]
    assert GROUP in paths, f"{GROUP} not among the ancestors {paths}"


def test_errors_401_404_400():
    bad = gitlab.Gitlab(URL, private_token="glpat-not-a-real-token-000", retry_transient_errors=False)
    expect_error(glexc.GitlabAuthenticationError, 401,
                 lambda: bad.projects.get(PROJECT, lazy=True).variables.list(get_all=False),
                 "401 Unauthorized")
    expect_error(glexc.GitlabGetError, 404,
                 lambda: gl.projects.get(GROUP + "/no-such-project-" + PREFIX.lower()))
    missing = gl.projects.get(GROUP + "/no-such-project-" + PREFIX.lower(), lazy=True)
    expect_error(glexc.GitlabListError, 404, lambda: missing.variables.list(get_all=False),
                 "404 Project Not Found")
    p = project()
    e = expect_error(glexc.GitlabCreateError, 400,
                     lambda: p.variables.create({"key": PREFIX + "MASKED", "value": "short", "masked": True}))
    assert "value" in str(e.error_message), e.error_message
    expect_error(glexc.GitlabCreateError, 400,
                 lambda: p.variables.create({"key": "not-a-valid-key", "value": "v"}),
                 "can contain only letters, digits and '_'.")
    key = PREFIX + "DUP"
    p.variables.create({"key": key, "value": "v"})
    expect_error(glexc.GitlabCreateError, 400, lambda: p.variables.create({"key": key, "value": "w"}),
                 "has already been taken")


def test_errors_403():
    if not LOW_TOKEN:
        raise Skipped("GITLAB_LOW_TOKEN is not set")
    low = gitlab.Gitlab(URL, private_token=LOW_TOKEN, retry_transient_errors=False)
    lp = low.projects.get(PROJECT, lazy=True)
    expect_error(glexc.GitlabListError, 403, lambda: lp.variables.list(get_all=False), "403 Forbidden")
    expect_error(glexc.GitlabCreateError, 403, lambda: lp.variables.create({"key": PREFIX + "NO", "value": "v"}))


def cleanup():
    """Deletes every variable this run created, whatever scope it has."""
    for owner in (project(), group()):
        for v in owner.variables.list(get_all=True):
            if v.key.startswith(PREFIX):
                try:
                    owner.variables.delete(v.key, filter={"environment_scope": v.environment_scope})
                except glexc.GitlabError as e:
                    print(f"cleanup: {v.key}: {e}", file=sys.stderr)


def main():
    tests = [(name, fn) for name, fn in globals().items() if name.startswith("test_") and callable(fn)]
    passed = failed = skipped = 0
    try:
        for name, fn in tests:
            try:
                fn()
            except Skipped as e:
                skipped += 1
                print(f"SKIP {name}: {e}")
            except Exception:
                failed += 1
                print(f"FAIL {name}")
                traceback.print_exc(file=sys.stdout)
            else:
                passed += 1
                print(f"ok   {name}")
    finally:
        cleanup()
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
