"""The image reference grammar: what parses, what does not, and why."""
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policies.kube.images import BadImageReference, parse_image

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(("reference", "domain", "path", "tag", "digest"), [
    ("busybox", "docker.io", "library/busybox", None, None),
    ("mpioperator/mpi-pi:openmpi", "docker.io", "mpioperator/mpi-pi", "openmpi", None),
    ("docker.io/kubeflow/mpi-horovod-mnist", "docker.io", "kubeflow/mpi-horovod-mnist", None, None),
    ("index.docker.io/library/ubuntu:22.04", "docker.io", "library/ubuntu", "22.04", None),
    ("quay.io/org/app:1.0", "quay.io", "org/app", "1.0", None),
    ("localhost/app", "localhost", "app", None, None),
    ("localhost:5000/a/b/c:v_1-2.3", "localhost:5000", "a/b/c", "v_1-2.3", None),
    ("Registry.Example.COM:443/x", "registry.example.com:443", "x", None, None),
    ("[::1]:5000/app:1", "[::1]:5000", "app", "1", None),
    ("10.0.0.1:5000/ns/app", "10.0.0.1:5000", "ns/app", None, None),
    (f"nvcr.io/nvidia/pytorch:24.01-py3@{DIGEST}", "nvcr.io", "nvidia/pytorch", "24.01-py3", DIGEST),
    (f"app@{DIGEST}", "docker.io", "library/app", None, DIGEST),
    ("a/b__c/d-e/f.g", "docker.io", "a/b__c/d-e/f.g", None, None),
    ("a---b/c_d:TAG", "docker.io", "a---b/c_d", "TAG", None),
    ("app:" + "t" * 128, "docker.io", "library/app", "t" * 128, None),
    ("app@sha512:" + "a" * 128, "docker.io", "library/app", None, "sha512:" + "a" * 128),
], ids=["official", "hub-user", "hub-explicit", "index-docker-io", "quay", "localhost", "localhost-port",
        "host-case", "ipv6", "ipv4", "tag-and-digest", "digest-only", "separators", "dashes", "longest-tag",
        "sha512"])
def test_valid_references(reference, domain, path, tag, digest):
    parsed = parse_image(reference)
    assert (parsed.domain, parsed.path, parsed.tag, parsed.digest) == (domain, path, tag, digest)


@pytest.mark.parametrize(("reference", "reason", "fix"), [
    ("", "it is empty", ""),
    (" busybox", "whitespace", ""),
    ("busy box", "whitespace", ""),
    ("https://quay.io/org/app", 'URL scheme ("https://")', "drop it"),
    ("MyOrg/App:1", 'the repository "MyOrg/App" must be lowercase', 'use "myorg/app:1"'),
    ("quay.io/Org/app@" + DIGEST, 'repository "Org/app" must be lowercase', f'use "quay.io/org/app@{DIGEST}"'),
    ("app:", "ends in ':' with no tag", "add the tag"),
    ("app:-dev", 'the tag "-dev"', ""),
    ("app:v1+build", 'the tag "v1+build"', ""),
    ("app:" + "t" * 129, "the tag is 129 characters, over the 128 allowed", ""),
    ("app@sha256:abc", "must be 64 lowercase hex digits (it has 3 characters)", ""),
    ("app@sha256:" + "A" * 64, "including 'A'", ""),
    ("app@md5:" + "a" * 32, 'must be "sha256:" followed by 64 hex digits', ""),
    ("app@" + "a" * 64, 'must be "sha256:"', ""),
    ("app@x@y", 'more than one "@"', ""),
    ("@" + DIGEST, "no repository name", ""),
    (":tag", "no repository name", ""),
    ("org//app", "empty component", ""),
    ("org/app/", "empty component", ""),
    ("/app", "empty component", ""),
    ("quay.io/", "empty component", ""),
    ("-app", '"-app" is not a valid repository component', ""),
    ("org/app.", '"app." is not a valid repository component', ""),
    ("org/a..b", '"a..b" is not a valid repository component', ""),
    ("org/a_-b", '"a_-b" is not a valid repository component', ""),
    ("org/app!", '"app!" is not a valid repository component', ""),
    ("quay.io:port/app", 'registry port in "quay.io:port" must be a number', ""),
    ("-quay.io/app", 'registry host "-quay.io" is not a valid host name', ""),
    ("quay..io/app", 'registry host "quay..io"', ""),
    ("[::1/app", 'registry "[::1" is not a valid [IPv6 address]:port', ""),
    ("a" * 256, "256 characters, over the 255 allowed", ""),
], ids=["empty", "leading-space", "inner-space", "scheme", "uppercase", "uppercase-with-host", "empty-tag",
        "tag-dash", "tag-plus", "tag-too-long", "short-digest", "uppercase-digest", "md5", "no-algorithm",
        "two-ats", "digest-alone", "tag-alone", "double-slash", "trailing-slash", "leading-slash", "host-only",
        "leading-dash", "trailing-dot", "double-dot", "mixed-separators", "bang", "port-word", "host-dash",
        "host-double-dot", "ipv6-unclosed", "too-long"])
def test_invalid_references_say_what_is_wrong(reference, reason, fix):
    with pytest.raises(BadImageReference) as raised:
        parse_image(reference)
    assert reason in str(raised.value)
    assert fix in raised.value.fix


@pytest.mark.parametrize(("a", "b", "same"), [
    ("mpioperator/mpi-pi:openmpi", "docker.io/mpioperator/mpi-pi:openmpi", True),
    ("ubuntu", "docker.io/library/ubuntu:latest", True),
    ("ubuntu:22.04", "ubuntu:24.04", False),
    (f"a@{DIGEST}", f"quay.io/b:1@{DIGEST}", True),
    (f"a:1@{DIGEST}", "a:1", False),
    ("quay.io/a", "docker.io/a", False),
], ids=["hub-prefix", "official-latest", "tags", "same-digest", "digest-vs-tag", "registries"])
def test_same_image(a, b, same):
    assert parse_image(a).same_image(parse_image(b)) is same


@pytest.mark.parametrize(("reference", "short"), [
    ("docker.io/library/ubuntu:22.04", "ubuntu:22.04"),
    ("docker.io/kubeflow/mnist", "kubeflow/mnist"),
    (f"quay.io/org/app:1@{DIGEST}", "quay.io/org/app:1@sha256:0123456789ab…"),
], ids=["official", "hub-user", "digest"])
def test_short_form(reference, short):
    assert parse_image(reference).short() == short


_ALNUM = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=6)
_SEPARATOR = st.sampled_from([".", "_", "__", "-", "--"])
_COMPONENT = st.builds(lambda first, rest: first + "".join(sep + part for sep, part in rest),
                       _ALNUM, st.lists(st.tuples(_SEPARATOR, _ALNUM), max_size=2))
_TAG = st.from_regex(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}\Z")
_HOST = st.sampled_from(["", "quay.io/", "localhost:5000/", "registry.example.com/", "10.1.2.3:443/"])


# ~3 ms an example (mostly generating it): CI's 10,000 would take half a minute for little gain
@settings(max_examples=min(settings.default.max_examples, 1000))
@given(_HOST, st.lists(_COMPONENT, min_size=1, max_size=3), st.none() | _TAG,
       st.none() | st.text("0123456789abcdef", min_size=64, max_size=64))
def test_every_reference_of_the_grammar_parses(host, components, tag, digest):
    # without a host, a first component with a "." would be read as one (as the runtimes do)
    assume(host or len(components) == 1 or "." not in components[0])
    reference = host + "/".join(components) + (f":{tag}" if tag else "") + (f"@sha256:{digest}" if digest else "")
    parsed = parse_image(reference)
    assert parsed.tag == tag
    assert parsed.digest == (f"sha256:{digest}" if digest else None)


@given(st.text(max_size=40))
def test_any_string_parses_or_says_why(reference):
    try:
        parse_image(reference)
    except BadImageReference as bad:
        assert str(bad)
