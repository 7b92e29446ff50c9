// The YAML editor's server-side refusals next to their fields: each 422 cause becomes a comment line right under the
// line of its field ("# ⚠ message", valid YAML, so it stays put while the text is edited and is read by screen
// readers with the text), and a highlight layer behind the textarea marks the field's line and the note.
import { parseDocument } from "yaml";
import { h } from "./dom.js";

export const NOTE = "# ⚠ ";

// A textarea over a <pre> that mirrors its text line by line; the pre's lines carry the highlight classes.
export function annotatedTextarea(attrs) {
  const layer = h("pre", { className: "yaml-layer", "aria-hidden": "true" });
  const text = h("textarea", { ...attrs, wrap: "off", className: "yaml-text" });
  const wrapper = h("div", { className: "yaml-editor" }, layer, text);
  let bad = new Set();
  function paint() {
    const lines = text.value.split("\n");
    layer.replaceChildren(
      ...lines.map((line, i) => {
        const note = line.trimStart().startsWith(NOTE);
        return h("div", { className: note ? "note" : bad.has(i + 1) ? "bad" : "" }, line || " ");
      }),
    );
    sync();
  }
  function sync() {
    layer.scrollTop = text.scrollTop;
    layer.scrollLeft = text.scrollLeft;
  }
  text.addEventListener("input", () => {
    // Lines shift as the user types: only notes keep their mark, found again in the text.
    bad = new Set();
    paint();
  });
  text.addEventListener("scroll", sync);
  return {
    wrapper,
    text,
    paint,
    setBadLines(lines) {
      bad = new Set(lines);
      paint();
    },
  };
}

export function withoutNotes(source) {
  return source
    .split("\n")
    .filter((line) => !line.trimStart().startsWith(NOTE))
    .join("\n");
}

// The text with each cause's note under its field's line (the nearest existing parent's when the field is missing),
// and the 1-based numbers of the fields' lines in the new text.
export function annotate(source, causes) {
  const lines = withoutNotes(source).split("\n");
  const clean = lines.join("\n");
  const notes = new Map();
  for (const cause of causes) {
    const offset = fieldStart(clean, cause.field || "");
    if (offset === null) continue;
    const line = clean.slice(0, offset).split("\n").length - 1;
    const indent = /^\s*/.exec(lines[line])[0];
    const message = cause.field && !String(cause.message || "").includes(cause.field) ? `${cause.field}: ${cause.message}` : cause.message;
    if (!notes.has(line)) notes.set(line, []);
    notes.get(line).push(`${indent}${NOTE}${String(message || "").replaceAll("\n", " ")}`);
  }
  const out = [];
  const bad = [];
  lines.forEach((line, i) => {
    out.push(line);
    if (notes.has(i)) {
      bad.push(out.length);
      out.push(...notes.get(i));
    }
  });
  return { text: out.join("\n"), bad };
}

function fieldPath(field) {
  const path = [];
  for (const part of field.split(".")) {
    const match = /^([^[\]]*)((?:\[\d+\])*)$/.exec(part);
    if (!match) return null;
    if (match[1]) path.push(match[1]);
    for (const index of match[2].matchAll(/\[(\d+)\]/g)) path.push(Number(index[1]));
  }
  return path;
}

// Where the field starts in the text: its key in a mapping, the item in a sequence, or its nearest existing parent.
function fieldStart(source, field) {
  const path = field ? fieldPath(field) : null;
  if (!path || !path.length) return null;
  let document;
  try {
    document = parseDocument(source);
  } catch {
    return null;
  }
  for (let depth = path.length; depth > 0; depth--) {
    const parent = depth === 1 ? document.contents : document.getIn(path.slice(0, depth - 1), true);
    const last = path[depth - 1];
    if (typeof last === "string" && parent?.items) {
      const pair = parent.items.find((item) => item.key?.value === last);
      if (pair?.key?.range) return pair.key.range[0];
    } else if (typeof last === "number" && parent?.items?.[last]?.range) {
      return parent.items[last].range[0];
    }
  }
  return null;
}

// The value's range (to select it in the editor), as [start, end] offsets.
export function fieldRange(source, field) {
  const path = field ? fieldPath(field) : null;
  if (!path) return null;
  try {
    const node = parseDocument(source).getIn(path, true);
    return node?.range ? [node.range[0], node.range[1]] : null;
  } catch {
    return null;
  }
}
