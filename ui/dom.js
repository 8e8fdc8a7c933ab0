// dom.js: the few DOM and time helpers every view of the page shares.
//
// Everything the API returns may hold any bytes (tool names, owners, notes,
// replicas), so nodes are only ever built here with createElement(NS) and
// filled with text nodes: no markup is ever parsed from data.

const SVG_NS = "http://www.w3.org/2000/svg";

// Appends @children (nodes, strings, numbers; null and false are skipped).
function append(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else if (child instanceof Node) node.appendChild(child);
    else node.appendChild(document.createTextNode(String(child)));
  }
  return node;
}

// Attributes are set one by one with setAttribute, so a value is only ever a
// value. "class" takes a string; a null or false value is left out.
function setAttrs(node, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    node.setAttribute(name, value === true ? "" : String(value));
  }
  return node;
}

/** An HTML element: el("td", {class: "state"}, "unknown"). */
export function el(tag, attrs, ...children) {
  return append(setAttrs(document.createElement(tag), attrs), children);
}

/** An SVG element, in the SVG namespace. */
export function svgEl(tag, attrs, ...children) {
  return append(setAttrs(document.createElementNS(SVG_NS, tag), attrs), children);
}

/** Removes every child of @node. */
export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

/** Replaces the children of @node. */
export function fill(node, ...children) {
  return append(clear(node), children);
}

/** A table cell; an absent value leaves it empty (CSS shows a dash). */
export function cell(cls, value, attrs) {
  const td = el("td", Object.assign({class: cls}, attrs || {}));
  if (value !== null && value !== undefined && value !== "") append(td, [value]);
  return td;
}

/** Milliseconds since the epoch of an API timestamp, or NaN. */
export function parseTime(s) {
  return typeof s === "string" ? Date.parse(s) : NaN;
}

/** A time in the API's own form: 2026-11-30T01:29:43.123Z. */
export function isoTime(ms) {
  return new Date(ms).toISOString();
}

/** The time of day of @ms in UTC with milliseconds: 01:29:43.123. */
export function clockTime(ms) {
  return isoTime(ms).slice(11, 23);
}

/** A duration for people: 850 ms, 1.204 s, 3 min 20 s, 2 h 5 min. */
export function duration(ms) {
  const a = Math.abs(ms);
  const sign = ms < 0 ? "-" : "";
  if (a < 1000) return sign + Math.round(a) + " ms";
  if (a < 60000) return sign + (a / 1000).toFixed(a < 10000 ? 3 : 1) + " s";
  if (a < 3600000) return sign + Math.floor(a / 60000) + " min " + Math.round((a % 60000) / 1000) + " s";
  return sign + Math.floor(a / 3600000) + " h " + Math.round((a % 3600000) / 60000) + " min";
}

/** How long ago @ms was, for a title: "4 min 2 s ago". */
export function ago(ms, now) {
  return Number.isFinite(ms) ? duration(now - ms) + " ago" : "";
}

/** The page's own link to one request; ids are percent-encoded all the same. */
export function requestHref(rid) {
  return "#/request/" + encodeURIComponent(rid);
}

/** A request id as the API allows one (anything else never reaches a URL). */
export function isId(s) {
  return typeof s === "string" && /^[A-Za-z0-9._~-]{1,128}$/.test(s);
}

/** JSON as one line of text, for details and answers. */
export function compactJson(value) {
  return value === undefined ? "" : JSON.stringify(value);
}
