// A line diff of two texts (longest common subsequence), drawn as a <pre> with added and removed lines marked.

import { h } from "./dom.js";

const MAX_CELLS = 4_000_000;

// The lines of `before` and `after` as [{op, line}]: op " " kept, "-" removed, "+" added, in reading order.
export function lineDiff(before, after) {
  const a = before.split("\n"), b = after.split("\n");
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length, endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) { endA--; endB--; }
  const x = a.slice(start, endA), y = b.slice(start, endB);
  const kept = (lines) => lines.map((line) => ({ op: " ", line }));
  if (x.length * y.length > MAX_CELLS) {
    // Too large to weigh line by line in a page: the differing middle shows as removed, then added.
    return [...kept(a.slice(0, start)), ...x.map((line) => ({ op: "-", line })), ...y.map((line) => ({ op: "+", line })), ...kept(a.slice(endA))];
  }
  // lengths[i][j]: the longest common subsequence of x[i:] and y[j:].
  const lengths = Array.from({ length: x.length + 1 }, () => new Uint32Array(y.length + 1));
  for (let i = x.length - 1; i >= 0; i--) {
    for (let j = y.length - 1; j >= 0; j--) {
      lengths[i][j] = x[i] === y[j] ? lengths[i + 1][j + 1] + 1 : Math.max(lengths[i + 1][j], lengths[i][j + 1]);
    }
  }
  const middle = [];
  let i = 0, j = 0;
  while (i < x.length || j < y.length) {
    if (i < x.length && j < y.length && x[i] === y[j]) { middle.push({ op: " ", line: x[i] }); i++; j++; }
    else if (i < x.length && (j === y.length || lengths[i + 1][j] >= lengths[i][j + 1])) middle.push({ op: "-", line: x[i++] });
    else middle.push({ op: "+", line: y[j++] });
  }
  return [...kept(a.slice(0, start)), ...middle, ...kept(a.slice(endA))];
}

const MARKS = { " ": null, "+": "add", "-": "del" };

// The diff as a <pre>: each line prefixed "+ " / "- " / "  ", added and removed lines in their own colour.
export function diffView(before, after, label) {
  const lines = lineDiff(before, after);
  const changed = lines.filter((l) => l.op !== " ").length;
  return h("pre", { class: "diff", "aria-label": label, "data-changed": changed },
    lines.map(({ op, line }) => h("span", { class: MARKS[op] }, `${op} ${line}\n`)));
}
