"""docs/architecture.md and the README's tree against the tree itself
(scripts/check_docs.py): every source file and every test folder named,
every function named defined. The check runs on the pages as they are,
then on copies with an omission or a stale name planted, each of which it
must report."""

import re
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

import check_docs  # noqa: E402

ARCH = (ROOT / "docs" / "architecture.md").read_text()
README = (ROOT / "README.md").read_text()


def test_the_pages_describe_the_tree_as_it_is():
    assert check_docs.problems(ROOT) == []


def without_lines(text, needle):
    """@text less every line holding @needle (there must be one)."""
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if needle not in line]
    assert len(kept) < len(lines), needle
    return "".join(kept)


def test_a_source_file_left_out_of_architecture_md_is_reported():
    found = check_docs.problems(ROOT, arch=without_lines(ARCH, "`stream.c`"))
    assert found == ["docs/architecture.md does not name the source file api/wire/stream.c",
                     "docs/architecture.md does not name the source file api/wire/stream.h"]


def test_a_header_named_only_beside_its_c_file_counts_and_its_absence_is_reported():
    arch = ARCH.replace("- `listen.c`, `.h`:", "- `listen.c`:")
    assert check_docs.problems(ROOT, arch=arch) == [
        "docs/architecture.md does not name the source file api/wire/listen.h"]


def test_a_file_named_in_another_folders_section_does_not_count():
    """ledger/store/conn.c is named in its section; api/wire/conn.c must be in its own."""
    arch = re.sub(r"^- `conn.c`, `.h`: a connection: its I/O.*$\n", "", ARCH, flags=re.M)
    found = check_docs.problems(ROOT, arch=arch)
    assert "docs/architecture.md does not name the source file api/wire/conn.c" in found
    assert not any("ledger/store/conn.c" in f for f in found)


def test_a_test_folder_left_out_is_reported():
    found = check_docs.problems(ROOT, arch=ARCH.replace("`adapters/`", "the adapters"))
    assert found == ["docs/architecture.md does not name the test folder tests/sdk/js/adapters/"]


def test_a_function_that_no_longer_exists_is_reported():
    arch = ARCH + "\nThe claim runs through `store_step_with_retries(claim_op)` and `on_request()`.\n"
    found = check_docs.problems(ROOT, arch=arch)
    assert found == [
        "docs/architecture.md names on_request(), which is defined nowhere",
        "docs/architecture.md names store_step_with_retries(claim_op), which is defined nowhere"]


def test_a_stale_name_without_parentheses_is_reported():
    found = check_docs.problems(ROOT, arch=ARCH + "\nSee `single_read` in batch.c.\n")
    assert found == ["docs/architecture.md names `single_read`, which the code never holds"]


def test_a_home_left_out_of_the_readme_tree_is_reported():
    readme = without_lines(README, "sdk/programs/ledger-mcp/      ")
    assert check_docs.problems(ROOT, readme=readme) == [
        "the README's tree does not name sdk/programs/ledger-mcp/"]


def test_a_test_folder_left_out_of_the_readme_tree_is_reported():
    readme = README.replace("faults/, ha/, chaos/", "ha/, chaos/")
    assert check_docs.problems(ROOT, readme=readme) == [
        "the README's tree does not name the test folder tests/faults/"]
