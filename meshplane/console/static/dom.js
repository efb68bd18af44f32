// Small DOM helpers: elements from a tag, attributes and children; tables that sort and filter.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2).toLowerCase(), value);
    else if (key === "class") el.className = value;
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

// A state's badge: Applied / Connected green, Pending amber, Failed / Disconnected red.
const TONES = {
  Applied: "good", Succeeded: "good", Connected: "good", Progressing: "busy", Baking: "busy",
  Pending: "warn", Waiting: "muted", Paused: "warn", Skipped: "muted", Superseded: "muted",
  Failed: "bad", RolledBack: "bad", Aborted: "bad", Disconnected: "bad",
};

export function badge(state) {
  return h("span", { class: `badge ${TONES[state] || "muted"}` }, state);
}

export function since(iso) {
  if (!iso) return "—";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)}s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)}h ago`;
  return `${Math.round(seconds / 86400)}d ago`;
}

export function link(href, text) {
  return h("a", { href }, text);
}

export function toast(message, tone = "good") {
  const el = document.getElementById("toast");
  clear(el, h("div", { class: `note ${tone}` }, message));
  setTimeout(() => { if (el.firstChild?.textContent === message) clear(el); }, 6000);
}

// A table of `rows` with `columns` [{key, label, cell(row) -> node|string, sort(row) -> value}]: a click on a
// heading sorts by it; the caller refreshes it with `update(rows)`.
export function dataTable(columns, { caption, empty = "Nothing here yet.", rowId } = {}) {
  let rows = [];
  let sortKey = columns[0].key;
  let ascending = true;
  const body = h("tbody");
  const head = h("tr", {}, columns.map((column) => {
    const button = h("button", { type: "button", class: "sort", onclick: () => {
      ascending = sortKey === column.key ? !ascending : true;
      sortKey = column.key;
      render();
    } }, column.label);
    return h("th", { scope: "col", "data-key": column.key }, button);
  }));
  const table = h("table", { class: "data" }, caption ? h("caption", {}, caption) : null, h("thead", {}, head), body);

  function value(row, column) {
    if (column.sort) return column.sort(row);
    const cell = column.cell ? column.cell(row) : row[column.key];
    return cell instanceof Node ? cell.textContent : cell;
  }

  function render() {
    const column = columns.find((c) => c.key === sortKey);
    const sorted = [...rows].sort((a, b) => {
      const x = value(a, column), y = value(b, column);
      const order = typeof x === "number" && typeof y === "number" ? x - y : String(x ?? "").localeCompare(String(y ?? ""));
      return ascending ? order : -order;
    });
    for (const th of head.children) th.setAttribute("aria-sort", th.dataset.key === sortKey ? (ascending ? "ascending" : "descending") : "none");
    clear(body, sorted.length ? sorted.map((row) => h("tr", { "data-id": rowId ? rowId(row) : null },
      columns.map((c) => h("td", { "data-label": c.label }, c.cell ? c.cell(row) : row[c.key] ?? "")))) :
      h("tr", {}, h("td", { colspan: columns.length, class: "empty" }, empty)));
  }

  render();
  return { el: table, update(next) { rows = next; render(); } };
}
