// Small helpers to build SVG and HTML elements without innerHTML: text always goes through textContent.

const SVG_NS = 'http://www.w3.org/2000/svg';

/** An SVG element with attributes (set with setAttribute, which the page's CSP allows). */
export function svg(tag, attributes = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attributes)) {
    if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  }
  if (text !== undefined) node.textContent = String(text);
  return node;
}

/** An SVG <title> child (the browser's tooltip and the element's accessible name). */
export function tooltip(node, text) {
  node.appendChild(svg('title', {}, text));
  return node;
}

/** An HTML element with a class, attributes and text. */
export function el(tag, className, text, attributes = {}) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  for (const [k, v] of Object.entries(attributes)) {
    if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  }
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** Removes every child of a node. */
export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

/** "Nice" tick values from 0 to at least `max`: steps of 1, 2 or 5 times a power of ten. */
export function ticks(max, target = 5) {
  if (!(max > 0)) return [0, 1];
  const raw = max / target;
  const pow = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * pow).find((s) => s >= raw) ?? 10 * pow;
  const out = [];
  for (let v = 0; v <= max + step * 0.999; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/** Sets a node's text only when it changed: an unchanged write would still cost a style and layout pass. */
export function setText(node, text) {
  const value = String(text ?? '');
  if (node.textContent !== value) node.textContent = value;
}

/** Sets `hidden` only when it changed. */
export function setHidden(node, hidden) {
  if (node.hidden !== Boolean(hidden)) node.hidden = Boolean(hidden);
}
