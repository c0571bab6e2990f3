#!/usr/bin/python3
"""The docs say what is true: every relative link and every path they name resolves, and every
shell block that runs in seconds runs.

Usage: check_docs.py ROOT links
       check_docs.py ROOT commands BUILD_DIR

The pages are README.md, ARCHITECTURE.md and every .md under docs/ and bench/.

links: a Markdown link that is not a URL names a file or folder relative to its page, and its
"#anchor", if any, a heading of that page (GitHub's slugs). A path in backticks that starts with
one of the project's top-level folders (src/, include/, docs/, bench/, ...) names files that exist;
braces ({h,cpp}) and globs (*) are expanded, and a path beginning "./build/" or holding "<" or "$"
is something a build or the user makes, not checked.

commands: each ```sh block runs, line by line (a line ending in a backslash continues), in a fresh
directory with ./build/ meaning BUILD_DIR and $TANDEM_DATA the project's data, under a timeout.
A block is skipped, with its reason printed, when the line before it is
`<!-- not run: REASON -->`. A line whose comment says "# refused: WHY" must fail, and its output
must hold WHY.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

TIMEOUT_S = 120


def pages(root):
    found = [os.path.join(root, "README.md"), os.path.join(root, "ARCHITECTURE.md")]
    for folder in ("docs", "bench"):
        found += sorted(glob.glob(os.path.join(root, folder, "**", "*.md"), recursive=True))
    return [p for p in found if os.path.isfile(p)]


def strip_code_blocks(text):
    """The text with fenced code blocks blanked (their lines kept, so line numbers still hold)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    text = strip_code_blocks(open(path, encoding="utf-8").read())
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def expand_braces(path):
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    out = []
    for choice in m.group(1).split(","):
        out += expand_braces(path[: m.start()] + choice + path[m.end():])
    return out


def check_links(root):
    problems = []
    top = {e for e in os.listdir(root) if not e.startswith("build") and e != "data"}
    for page in pages(root):
        rel_page = os.path.relpath(page, root)
        text = strip_code_blocks(open(page, encoding="utf-8").read())
        for lineno, line in enumerate(text.split("\n"), 1):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"^[a-z]+:", target):
                    continue  # a URL
                file_part, _, anchor = target.partition("#")
                resolved = os.path.normpath(os.path.join(os.path.dirname(page), file_part)) if file_part else page
                if not os.path.exists(resolved):
                    problems.append(f"{rel_page}:{lineno}: link ({target}) names no file")
                elif anchor and os.path.isfile(resolved) and resolved.endswith(".md") and anchor not in anchors(resolved):
                    problems.append(f"{rel_page}:{lineno}: link ({target}) names no heading of {file_part or rel_page}")
            for token in re.findall(r"`([^`\s]+)`", line):
                path = token.rstrip(".,:;)")
                if path.startswith("./"):
                    path = path[2:]
                if "<" in path or "$" in path or path.split("/")[0] not in top or "/" not in path:
                    continue
                if not all(glob.glob(os.path.join(root, p)) for p in expand_braces(path)):
                    problems.append(f"{rel_page}:{lineno}: `{token}` names no file")
    return problems


def shell_blocks(page):
    """(line number, skip reason or None, [command lines]) for each ```sh block of the page."""
    lines = open(page, encoding="utf-8").read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() in ("```sh", "```bash"):
            before = lines[i - 1].strip() if i > 0 else ""
            m = re.match(r"<!--\s*not run:\s*(.*?)\s*-->", before)
            start, body = i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            commands, pending = [], ""
            for line in body:
                if line.rstrip().endswith("\\"):
                    pending += line.rstrip()[:-1] + " "
                    continue
                command = (pending + line).strip()
                pending = ""
                if command and not command.startswith("#"):
                    commands.append(command)
            blocks.append((start, m.group(1) if m else None, commands))
        i += 1
    return blocks


def run_commands(root, build_dir):
    problems, ran, skipped = [], 0, 0
    env = dict(os.environ, TANDEM_DATA=os.path.join(root, "data"))
    for page in pages(root):
        rel_page = os.path.relpath(page, root)
        for lineno, reason, commands in shell_blocks(page):
            if reason is not None:
                print(f"skipped {rel_page}:{lineno}: {reason}")
                skipped += 1
                continue
            for command in commands:
                refused = re.search(r"#\s*refused:\s*(.*)$", command)
                line = command.replace("./build/", build_dir.rstrip("/") + "/")
                with tempfile.TemporaryDirectory() as cwd:
                    try:
                        done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True,
                                              text=True, timeout=TIMEOUT_S)
                    except subprocess.TimeoutExpired:
                        problems.append(f"{rel_page}:{lineno}: `{command}` ran past {TIMEOUT_S} s: mark its "
                                        "block <!-- not run: REASON -->")
                        continue
                ran += 1
                output = done.stdout + done.stderr
                if refused and (done.returncode == 0 or refused.group(1).strip() not in output):
                    problems.append(f"{rel_page}:{lineno}: `{command}` should be refused, exited "
                                    f"{done.returncode}:\n{output[-2000:]}")
                elif not refused and done.returncode != 0:
                    problems.append(f"{rel_page}:{lineno}: `{command}` exited {done.returncode}:\n{output[-2000:]}")
                else:
                    print(f"ran {rel_page}:{lineno}: {command}")
    print(f"{ran} commands ran, {skipped} blocks not run")
    if ran == 0:
        problems.append("no command ran: the check checked nothing")
    return problems


def main():
    if len(sys.argv) < 3 or sys.argv[2] not in ("links", "commands") or (sys.argv[2] == "commands") != (len(sys.argv) == 4):
        sys.exit(__doc__)
    root = os.path.abspath(sys.argv[1])
    problems = check_links(root) if sys.argv[2] == "links" else run_commands(root, os.path.abspath(sys.argv[3]))
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
