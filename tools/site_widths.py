"""List what a browser cannot show whole in the built documentation site at a
given window width: tables that scroll sideways, table cells whose text
breaks inside a word, code blocks cut off at the page's edge, and code
blocks whose copy button covers text.

A maintainer's check of the site's layout (Chromium is not installed by
``install.sh``; on Debian ``apt-get install chromium``)::

    mkdocs build -d /tmp/site
    python tools/site_widths.py /tmp/site                    # every page, 1,280 pixels wide
    python tools/site_widths.py /tmp/site performance/index.html --width 1280

For each page it writes a copy with a small script appended, which, once the
page is laid out, measures in the browser:

* every table's scroll container (``.md-typeset__scrollwrap``, else the table):
  it scrolls when its ``scrollWidth`` exceeds its ``clientWidth``;
* every code block (``pre``): it is cut off when it reaches past the page's
  text column (a long line scrolls inside its block, which is counted, not a
  problem);
* every table cell: the text breaks inside a word when the cell has more line
  boxes (``Range.getClientRects``, one rectangle per line of a text node)
  than spaces would explain, i.e. a line of a text node starts inside a word;
* every code block's copy button (``.md-code__nav``): it covers text when its
  rectangle meets the rectangle of the code's first line's text;

and writes what it found into the page, which Chromium's ``--dump-dom`` prints.
Prints one line per problem, ``PAGE: what``, and exits 1 if there is any.
"""

import argparse
import glob
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import List, Tuple

MEASURE = r"""
<script>
window.addEventListener("load", () => {
  const found = [];
  const label = (element) => (element.textContent || "").trim().replace(/\s+/g, " ").slice(0, 60);
  document.querySelectorAll("article table").forEach((table) => {
    const box = table.closest(".md-typeset__scrollwrap") || table;
    if (box.scrollWidth > box.clientWidth + 1) {
      found.push(`table scrolls sideways (${box.scrollWidth} > ${box.clientWidth} px): ${label(table.rows[0])}`);
    }
    table.querySelectorAll("th, td").forEach((cell) => {
      const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const text = node.textContent;
        let previousTop = null;
        for (let index = 0; index < text.length; index++) {
          if (/\s/.test(text[index])) continue;
          const range = document.createRange();
          range.setStart(node, index);
          range.setEnd(node, index + 1);
          const rect = range.getClientRects()[0];
          if (!rect) continue;
          if (previousTop !== null && rect.top > previousTop + 2 && index > 0 && !/[\s\-\/,]/.test(text[index - 1])) {
            found.push(`cell breaks inside a word at "${text.slice(Math.max(0, index - 12), index)}|${text.slice(index, index + 12)}"`);
          }
          previousTop = rect.top;
        }
      }
    });
  });
  const column = document.querySelector("article").getBoundingClientRect();
  let scrolling = 0;
  document.querySelectorAll("article pre > code").forEach((code) => {
    const block = code.parentElement.getBoundingClientRect();
    if (block.right > column.right + 1 || block.left < column.left - 1) {
      found.push(`code block cut off: it reaches past the page's text column: ${label(code)}`);
    }
    if (code.scrollWidth > code.clientWidth + 1) scrolling += 1;
    const nav = code.parentElement.querySelector(".md-code__nav");
    const first = code.firstChild && document.createRange();
    if (nav && first) {
      first.selectNodeContents(code);
      const lines = Array.from(first.getClientRects()).filter((rect) => rect.width > 0);
      const button = nav.getBoundingClientRect();
      const covered = lines.some(
        (line) => line.right > button.left && line.left < button.right && line.bottom > button.top && line.top < button.bottom
      );
      if (covered) found.push(`copy button covers text: ${label(code)}`);
    }
  });
  const out = document.createElement("pre");
  out.id = "site-widths";
  out.textContent = JSON.stringify({found: found, scrolling: scrolling});
  document.body.appendChild(out);
});
</script>
"""
RESULT = re.compile(r'<pre id="site-widths">(.*?)</pre>', re.S)


def chromium() -> str:
    for name in ("chromium", "chromium-headless-shell", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    raise SystemExit("no Chromium found: apt-get install chromium (a maintainer's check, not in install.sh)")


def measure(browser: str, page: str, width: int) -> Tuple[List[str], int]:
    """The problems the browser finds on one built page, and how many of its
    code blocks scroll sideways inside themselves (long commands do: not a
    problem)."""
    with open(page, encoding="utf-8") as handle:
        text = handle.read()
    with tempfile.NamedTemporaryFile("w", suffix=".html", dir=os.path.dirname(page), delete=False) as copy:
        copy.write(text.replace("</body>", MEASURE + "</body>"))
    try:
        dom = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--window-size={width},2000",
                "--virtual-time-budget=3000",
                "--run-all-compositor-stages-before-draw",
                "--dump-dom",
                "file://" + copy.name,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    finally:
        os.unlink(copy.name)
    match = RESULT.search(dom)
    if match is None:
        return ["the browser printed no measurements (did the page load?)"], 0
    measured = json.loads(html.unescape(match.group(1)))
    return measured["found"], measured["scrolling"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", help="the built site (mkdocs build -d SITE)")
    parser.add_argument("pages", nargs="*", help="pages under SITE (default: every index.html)")
    parser.add_argument("--width", type=int, default=1280, help="the window's width in pixels (default: 1280)")
    options = parser.parse_args(argv)
    pages = options.pages or sorted(
        os.path.relpath(path, options.site)
        for path in glob.glob(os.path.join(options.site, "**", "index.html"), recursive=True)
        if "/search/" not in path
    )
    browser = chromium()
    problems = scrolling = 0
    for page in pages:
        found, scrolls = measure(browser, os.path.join(options.site, page), options.width)
        for problem in found:
            print(f"{page}: {problem}")
        problems += len(found)
        scrolling += scrolls
    print(
        f"{len(pages)} page(s) at {options.width} px: {problems} problem(s); "
        f"{scrolling} code block(s) scroll sideways inside themselves"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
