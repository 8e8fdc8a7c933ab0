"""The C SDK's ABI as a user installs it: make install-sdk into a prefix of
its own, then the shared library's soname and links, the example built
through that prefix's pkg-config and run against a live ledgerd, the
dynamic exports against the installed header's declarations, and
ledger_client_version() against VERSION, the one place the version is written.

Nothing here reads build/: what is checked is what a user's program sees.
"""

import os
import re
import subprocess

import pytest

from conftest import ROOT, new_id

MAKEFILE = (ROOT / "Makefile").read_text()


def makefile_var(name):
    m = re.search(r"^%s\s*:=\s*(\S+)\s*$" % name, MAKEFILE, re.M)
    assert m, "the Makefile sets no %s" % name
    return m.group(1)


VERSION = (ROOT / "VERSION").read_text().strip()
SOVERSION = makefile_var("SOVERSION")
SONAME = "libledger_client.so.%s" % SOVERSION
NODE = "LEDGER_CLIENT_%s" % SOVERSION


def out_of(argv, env=None):
    p = subprocess.run([str(a) for a in argv], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, "%s exited %d\n%s\n%s" % (argv, p.returncode, p.stdout,
                                                          p.stderr)
    return p.stdout


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """make install-sdk PREFIX=<a fresh directory>."""
    prefix = tmp_path_factory.mktemp("abi") / "prefix"
    out_of(["make", "-C", ROOT, "--no-print-directory", "install-sdk", "PREFIX=%s" % prefix])
    return prefix


def cc_with_pkg_config(prefix, source, program):
    """Compiles @source as a user does: the installed .pc's flags, nothing else."""
    e = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    e.pop("PKG_CONFIG_LIBDIR", None)
    flags = out_of(["pkg-config", "--cflags", "--libs", "ledger_client"], env=e).split()
    out_of(["cc", "-std=c11", "-Wall", "-Werror", "-Werror=implicit-function-declaration",
            source] + flags + ["-o", program])
    return program


@pytest.fixture(scope="module")
def example(prefix):
    return cc_with_pkg_config(prefix, ROOT / "sdk" / "c" / "examples" / "send_email.c",
                              prefix.parent / "send_email")


def dynamic_section(path):
    """readelf -d's entries of @path: [(tag, value)], e.g. ("SONAME", "libledger_client.so.1")."""
    entries = []
    for line in out_of(["readelf", "-d", path]).splitlines():
        m = re.search(r"\((\w+)\)\s+.*\[(.*)\]", line)
        if m:
            entries.append((m.group(1), m.group(2)))
    return entries


def header_code(header_text):
    """The header without comments and preprocessor lines."""
    text = re.sub(r"/\*.*?\*/", " ", header_text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)


def inline_functions(header_text):
    """The header's static inline functions: {name: its body}."""
    text = header_code(header_text)
    found = {}
    for m in re.finditer(r"static\s+inline\b[^;{]*?\b([A-Za-z_]\w*)\s*\([^;{]*\)\s*\{", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        found[m.group(1)] = text[m.end():i - 1]
    return found


def declared_functions(header_text):
    """Every function the header declares for the library to define: each
    name followed by its parameter list, outside the bodies of the inline
    functions, less the inline functions themselves. A function pointer's
    typedef ("enum x (*fn)(...)") is no declaration of a function."""
    text = header_code(header_text)
    inline = inline_functions(header_text)
    for body in inline.values():
        text = text.replace(body, " ")
    return set(re.findall(r"\b([A-Za-z_]\w*)\s*\((?!\s*\*)", text)) - set(inline)


def test_the_library_is_installed_with_its_soname_and_links(prefix):
    lib = prefix / "lib"
    real = lib / ("libledger_client.so.%s" % VERSION)
    assert real.is_file() and not real.is_symlink(), sorted(os.listdir(lib))
    assert os.readlink(lib / SONAME) == real.name
    assert os.readlink(lib / "libledger_client.so") == SONAME
    assert ("SONAME", SONAME) in dynamic_section(real), dynamic_section(real)


def test_the_example_needs_the_soname_and_loads_the_installed_library(prefix, example):
    needed = [v for tag, v in dynamic_section(example) if tag == "NEEDED"]
    assert SONAME in needed and "libledger_client.so" not in needed, needed
    e = dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib"))
    ldd = out_of(["ldd", example], env=e)
    assert "%s => %s" % (SONAME, prefix / "lib" / SONAME) in ldd, ldd


def test_the_example_runs_against_the_installed_library(service, prefix, example):
    led = service.ledgerd
    e = dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib"),
             LEDGER_URL="http://%s:%d" % (led.host, led.port),
             LEDGER_TOKEN=service.token("agent"))
    e.pop("LEDGER_CA_FILE", None)
    rid = new_id()
    first = out_of([example, rid, "ada@example.com"], env=e)
    assert "sent: {\"message_id\":\"msg-%s:call_00\"}" % rid in first, first
    second = out_of([example, rid, "ada@example.com"], env=e)
    assert "already sent, not sending again" in second, second


def test_the_library_exports_exactly_the_installed_headers_functions(prefix):
    declared = declared_functions((prefix / "include" / "ledger_client.h").read_text())
    assert "ledger_client_open_abi" in declared and "ledger_client_version" in declared, declared
    exported, others = {}, []
    for line in out_of(["nm", "-D", "--defined-only", prefix / "lib" / SONAME]).splitlines():
        _, kind, name = line.split()
        if kind == "T":
            symbol, _, node = name.partition("@@")
            exported[symbol] = node
        else:
            others.append((kind, name))
    # Besides the functions, only the version node's own symbol.
    assert others == [("A", NODE)], others
    assert sorted(set(exported) - declared) == [], "exported, not in the header"
    assert sorted(declared - set(exported)) == [], "in the header, not exported"
    assert {node for node in exported.values()} == {NODE}, exported


VERSION_PROGRAM = r"""
#include <stdio.h>
#include <ledger_client.h>

int main(void)
{
	printf("%s\n", ledger_client_version());
	return 0;
}
"""


def test_ledger_client_version_is_the_makefiles_version(prefix):
    source = prefix.parent / "version.c"
    source.write_text(VERSION_PROGRAM)
    program = cc_with_pkg_config(prefix, source, prefix.parent / "version")
    e = dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib"))
    assert out_of([program], env=e) == VERSION + "\n"
    e = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    assert out_of(["pkg-config", "--modversion", "ledger_client"], env=e) == VERSION + "\n"


def test_each_inline_function_calls_its_exported_twin_with_the_headers_sizes(prefix):
    header = (prefix / "include" / "ledger_client.h").read_text()
    inline = inline_functions(header)
    declared = declared_functions(header)
    assert "ledger_client_abi_here" in inline and "ledger_client_tool_call" in inline, inline
    for name, body in inline.items():
        if name == "ledger_client_abi_here":
            continue
        assert name + "_abi" in declared, name
        assert re.search(r"\b%s_abi\s*\(" % name, body), (name, body)
        assert "ledger_client_abi_here()" in body, (name, body)


# A program built against a header newer than the library: ledger_call and
# ledger_outcome have each gained a field at their end. The library reads the
# call as long as the new field is zero, refuses it (nothing sent, the tool
# not run) when it is set, and zeroes the outcome's field it does not know.
NEWER_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include <ledger_client.h>

static int runs;

static enum ledger_tool_status tool(void *ctx, const char *key, uint64_t token, char **result)
{
	(void)ctx; (void)key; (void)token; (void)result;
	runs++;
	return LEDGER_TOOL_SUCCEEDED;
}

int main(int argc, char **argv)
{
	struct ledger_client_options opts = {.url = argv[1], .token = argv[2]};
	struct ledger_client *c = NULL;
	struct ledger_call call = {.request_id = argv[3], .tool_call_id = "call_00"};
	struct ledger_outcome out;
	enum ledger_client_err rc;

	if (argc != 4 || ledger_client_open(&opts, &c) != LEDGER_CLIENT_OK)
		return 2;
	memset(&out, 0x5a, sizeof(out));
	call.future = "set";
	rc = ledger_client_tool_call(c, &call, tool, NULL, &out);
	printf("set: %s %s runs=%d future=%llu\n", ledger_client_strerror(rc),
	       ledger_client_outcome_name(out.kind), runs, (unsigned long long)out.future);
	ledger_client_outcome_clear(&out);
	memset(&out, 0x5a, sizeof(out));
	call.future = NULL;
	rc = ledger_client_tool_call(c, &call, tool, NULL, &out);
	printf("zero: %s %s runs=%d future=%llu\n", ledger_client_strerror(rc),
	       ledger_client_outcome_name(out.kind), runs, (unsigned long long)out.future);
	ledger_client_outcome_clear(&out);
	ledger_client_close(c);
	return 0;
}
"""


def grow(header, struct, field):
    """@header with @field added at the end of @struct, as a later release would."""
    start = header.index("struct %s {" % struct)
    end = header.index("\n};", start)
    return header[:end] + "\n\t%s" % field + header[end:]


def test_a_program_built_against_a_newer_header_runs_on_this_library(service, prefix):
    header = (prefix / "include" / "ledger_client.h").read_text()
    header = grow(header, "ledger_call", "const char *future;")
    header = grow(header, "ledger_outcome", "uint64_t future;")
    newer = prefix.parent / "newer"
    newer.mkdir(exist_ok=True)
    (newer / "ledger_client.h").write_text(header)
    source = newer / "program.c"
    source.write_text(NEWER_PROGRAM)
    program = newer / "program"
    e = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    libs = out_of(["pkg-config", "--libs", "ledger_client"], env=e).split()
    out_of(["cc", "-std=c11", "-Wall", "-Werror", "-I", newer, source] + libs + ["-o", program])
    led = service.ledgerd
    e = dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib"))
    printed = out_of([program, "http://%s:%d" % (led.host, led.port), service.token("agent"),
                      new_id()], env=e)
    assert printed.splitlines() == [
        "set: invalid argument refused runs=0 future=0",
        "zero: ok executed runs=1 future=0",
    ], printed


SHORT_PROGRAM = r"""
#include <stdio.h>
#include <ledger_client.h>

int main(void)
{
	struct ledger_client_abi abi = *ledger_client_abi_here();
	struct ledger_client_options opts = {.url = "http://127.0.0.1:9"};
	struct ledger_client *c = NULL;
	enum ledger_client_err rc;

	abi.options = 8; /* shorter than the first layout: no header ever made it */
	rc = ledger_client_open_abi(&opts, &c, &abi);
	printf("short: %s\n", ledger_client_strerror(rc));
	abi = *ledger_client_abi_here();
	abi.count = 1; /* names fewer structs than the first layout has */
	rc = ledger_client_open_abi(&opts, &c, &abi);
	printf("few: %s\n", ledger_client_strerror(rc));
	rc = ledger_client_open(&opts, &c);
	printf("here: %s\n", ledger_client_strerror(rc));
	ledger_client_close(c);
	return 0;
}
"""


def test_a_struct_shorter_than_the_first_layout_is_refused(prefix):
    source = prefix.parent / "short.c"
    source.write_text(SHORT_PROGRAM)
    program = cc_with_pkg_config(prefix, source, prefix.parent / "short")
    e = dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib"))
    assert out_of([program], env=e).splitlines() == [
        "short: invalid argument", "few: invalid argument", "here: ok"]
