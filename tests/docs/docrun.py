"""Reads the code blocks of a Markdown page and says what each one shows.

A page's fenced blocks are what a reader copies. Each becomes a `Block`:
its language, its text, its line, and the directive of the HTML comment
just above it, if any:

    <!-- doctest: skip: REASON -->        not run, and REASON says why
    <!-- doctest: excerpt: PATH -->       every line of the block is a line of
                                          PATH, in order (`...` lines skip)
    <!-- doctest: policy -->              a failover policy ledgerd must accept
    <!-- doctest: file: PATH -->          the whole of PATH, byte for byte (also
                                          written `<!-- file: PATH -->`)
    <!-- doctest: run: COMMAND -->        a program, run by COMMAND in the shell
                                          session; the `# ` lines that end it
                                          are its output
    <!-- doctest: imports: REASON -->     a sketch around the TypeScript client:
                                          what it imports from `ledgerd` exists,
                                          and REASON names the test that runs it

A shell block (`sh`) is a list of `Command`s, each with the output the page
shows for it: the `# ` comment lines right after it. A `json` block right
after a shell block is the output of that block's last command.

`matches()` compares an output with what the page shows: whitespace
outside strings does not count, `...` (or `…`) stands for anything, and
times, what is left of a lease, the history's sequence numbers and the
listening address are masked on both sides.
"""

import json
import re
import subprocess
from dataclasses import dataclass, field

FENCE = re.compile(r"^```(\S*)\s*$")
DIRECTIVE = re.compile(
    r"^<!--\s*(?:doctest:\s*)?(skip|excerpt|policy|file|imports|run)\s*(?::\s*(.*?))?\s*-->\s*$")
IMPORT = re.compile(r'import\s*\{([^}]*)\}\s*from\s*"(ledgerd(?:/[a-z-]+)?)"')
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
# What differs from run to run: what is left of a lease, and the history's sequence numbers.
LEFT = re.compile(r'"(lease_ms|lease_ms_left|retry_after_ms|seq)":\s*\d+')


@dataclass
class Command:
    text: str
    line: int
    shown: list = field(default_factory=list)  # the page's output lines, without "# "


@dataclass
class Block:
    page: str
    line: int
    lang: str
    text: str
    directive: str = ""
    argument: str = ""
    after_shell: bool = False  # right after a shell block, nothing between
    commands: list = field(default_factory=list)

    @property
    def where(self):
        return "%s:%d" % (self.page, self.line)


def blocks(page, text):
    """The fenced blocks of a page, in order."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang, body = i, m.group(1), []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        b = Block(page, start + 1, lang, "\n".join(body) + "\n")
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        d = DIRECTIVE.match(lines[k]) if k >= 0 else None
        if d:
            b.directive, b.argument = d.group(1), d.group(2) or ""
        b.after_shell = bool(out) and out[-1].lang == "sh" and k >= 0 and \
            lines[k] == "```" and out[-1].line + len(out[-1].text.split("\n")) == k + 1
        if lang == "sh":
            b.commands = commands(body, start + 2)
        out.append(b)
    return out


def complete(text):
    """Whether shell text is a whole command: no open quote or loop, no trailing backslash."""
    if text.rstrip().endswith("\\"):
        return False
    return subprocess.run(["bash", "-n", "-c", text], capture_output=True).returncode == 0


def commands(lines, first_line):
    """The commands of a shell block and the output shown after each."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            i += 1
            continue
        start, text = i, [line]
        doc = HEREDOC.search(line)
        i += 1
        if doc:
            while i < len(lines) and lines[i] != doc.group(2):
                text.append(lines[i])
                i += 1
            text.append(lines[i])
            i += 1
        while not complete("\n".join(text)) and i < len(lines):
            text.append(lines[i])
            i += 1
        cmd = Command("\n".join(text), first_line + start)
        while i < len(lines) and (lines[i].startswith("# ") or lines[i] == "#"):
            cmd.shown.append(lines[i][2:])
            i += 1
        out.append(cmd)
    return out


def squeeze(text):
    """Text without the whitespace outside JSON strings."""
    out, in_string, escaped = [], False, False
    for ch in text:
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif not ch.isspace():
            out.append(ch)
    return "".join(out)


def mask(text, address):
    text = LEFT.sub(r'"\1":<n>', TIME.sub("<time>", text))
    return text.replace(address, "<address>") if address else text


def pattern(shown):
    """A regular expression of what the page shows, `...` and `…` being anything."""
    parts = re.split(r"\.\.\.|…", shown)
    return re.compile(".*?".join(re.escape(p) for p in parts), re.S)


def matches(shown, actual, address=""):
    """Whether an output agrees with the lines the page shows for it."""
    shown, actual = mask(shown, address).strip(), mask(actual, address).strip()
    if shown[:1] in "{[" or actual[:1] in "{[":
        return bool(pattern(squeeze(shown)).fullmatch(squeeze(actual)))
    want = [" ".join(l.split()) for l in shown.split("\n")]
    got = [" ".join(l.split()) for l in actual.split("\n")]
    return lines_match(want, got)


def lines_match(want, got):
    """Line by line, a line `...` standing for any number of lines."""
    if not want:
        return not got
    if want[0] == "...":
        return any(lines_match(want[1:], got[k:]) for k in range(len(got) + 1))
    return bool(got) and bool(pattern(want[0]).fullmatch(got[0])) and lines_match(want[1:], got[1:])


STATUS = re.compile(r"^(\d{3}) (.*)$", re.S)


def check_http(shown_lines, stdout, status, address=""):
    """Compares curl's output with the page: returns None when they agree, else why not.

    The page shows either `STATUS BODY` (curl -s), or curl -i's status line and
    some of its header fields, then the body; or just the body."""
    shown = "\n".join(shown_lines)
    if shown_lines and shown_lines[0].startswith("HTTP/"):
        head, _, body = stdout.replace("\r\n", "\n").partition("\n\n")
        got_head = head.split("\n")
        if got_head[0].strip() != shown_lines[0].strip():
            return "status line %r, the page shows %r" % (got_head[0], shown_lines[0])
        fields = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip()
                  for l in got_head[1:] if ":" in l}
        rest = []
        for l in shown_lines[1:]:
            m = re.match(r"^([A-Za-z0-9-]+): (.*)$", l)
            if m and not l.startswith("{"):
                if fields.get(m.group(1).lower()) != m.group(2).strip():
                    return "header %s is %r, the page shows %r" % (
                        m.group(1), fields.get(m.group(1).lower()), m.group(2))
            else:
                rest.append(l)
        if rest and not matches("\n".join(rest), body, address):
            return "body %s, the page shows %s" % (body.strip(), "\n".join(rest))
        return None
    m = STATUS.match(shown)
    if m and shown[:1].isdigit():
        if str(status) != m.group(1):
            return "status %s (%s), the page shows %s" % (status, stdout.strip(), m.group(1))
        shown = m.group(2)
    if not matches(shown, stdout, address):
        return "answer %s, the page shows %s" % (stdout.strip(), shown)
    return None


def excerpt_of(block_text, file_text):
    """Whether every line of a block is a line of a file, in order (`...` lines skip)."""
    lines = [l.strip() for l in file_text.split("\n")]
    k = 0
    for l in block_text.split("\n"):
        l = l.strip()
        if not l or l == "...":
            continue
        while k < len(lines) and lines[k] != l:
            k += 1
        if k == len(lines):
            return l
        k += 1
    return None


def looks_like_json(text):
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def imports(block_text):
    """What a TypeScript block imports from the ledgerd package: {module: [names]}."""
    out = {}
    for names, module in IMPORT.findall(block_text):
        out.setdefault(module, []).extend(n.strip() for n in names.split(",") if n.strip())
    return out


def program_output(block_text):
    """The `# ` lines that end a program's block: what the page says it prints."""
    lines = block_text.rstrip("\n").split("\n")
    k = len(lines)
    while k > 0 and lines[k - 1].startswith("# "):
        k -= 1
    return [l[2:] for l in lines[k:]]
