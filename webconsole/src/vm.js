// One VM: overview (disks, interfaces), events, YAML (view and edit), serial console and VNC, as tabs.
import { ApiError, get, listWatch, request, VM_API } from "./api.js";
import { actionButtons } from "./actions.js";
import { age, h, notify } from "./dom.js";
import { vmCharts } from "./charts.js";
import { serialConsole } from "./serial.js";
import { vncConsole } from "./vnc.js";
import { parse, stringify } from "yaml";
import { annotate, annotatedTextarea, fieldRange } from "./yamlnotes.js";

const TABS = [
  ["overview", "Overview"],
  ["events", "Events"],
  ["yaml", "YAML"],
  ["console", "Serial console"],
  ["vnc", "VNC"],
];

export function vmPage(root, namespace, name, tab = "overview") {
  const base = `#/vm/${namespace}/${name}`;
  const panel = h("section", { id: "tab-panel", "aria-label": TABS.find(([id]) => id === tab)?.[1] || "" });
  const header = h("div", { className: "vm-header" });
  root.replaceChildren(
    h("p", {}, h("a", { href: "#/" }, "← Virtual machines")),
    h("h1", {}, `${namespace}/${name}`),
    header,
    h(
      "nav",
      { className: "tabs", "aria-label": "VM sections" },
      TABS.map(([id, label]) =>
        h("a", { href: `${base}/${id}`, "aria-current": id === tab ? "page" : undefined }, label),
      ),
    ),
    panel,
  );
  let vm = null;
  let vmi = null;
  // The overview's facts follow every watch event; its charts live on, restarted only when the VMI changes node.
  const facts = h("div");
  const charts = h("div", { id: "charts" });
  let chartsNode = "";
  let stopCharts = () => {};
  if (tab === "overview") panel.replaceChildren(facts, charts);
  const vmPath = `${VM_API}/namespaces/${namespace}/virtualmachines/${name}`;
  const renderHeader = () => {
    if (!vm) return;
    header.replaceChildren(
      h("p", {}, "Status: ", h("strong", { "data-field": "status" }, vm.status?.printableStatus || "")),
      actionButtons(vm),
    );
    if (tab !== "overview") return;
    overview(facts, vm, vmi);
    const node = vmi?.status?.phase === "Running" ? vmi.status.nodeName || "" : "";
    if (node !== chartsNode) {
      stopCharts();
      charts.replaceChildren();
      chartsNode = node;
      stopCharts = node ? vmCharts(charts, namespace, name, node) : () => {};
    }
  };
  const field = (n) => `fieldSelector=metadata.name%3D${encodeURIComponent(n)}`;
  const cleanups = [
    listWatch(`${VM_API}/namespaces/${namespace}/virtualmachines?${field(name)}`, (items) => {
      vm = items.get(`${namespace}/${name}`) || null;
      renderHeader();
    }),
    listWatch(`${VM_API}/namespaces/${namespace}/virtualmachineinstances?${field(name)}`, (items) => {
      vmi = items.get(`${namespace}/${name}`) || null;
      renderHeader();
    }),
  ].map((w) => () => w.stop());
  cleanups.push(() => stopCharts());
  if (tab === "events") cleanups.push(events(panel, namespace, name));
  if (tab === "yaml") yamlEditor(panel, vmPath);
  if (tab === "console") cleanups.push(serialConsole(panel, namespace, name));
  if (tab === "vnc") cleanups.push(vncConsole(panel, namespace, name));
  return () => cleanups.forEach((c) => c());
}

function overview(panel, vm, vmi) {
  const spec = vm.spec?.template?.spec || {};
  const rows = [
    ["Status", vm.status?.printableStatus],
    ["Run strategy", vm.spec?.runStrategy || (vm.spec?.running ? "Always" : "Halted")],
    ["Phase", vmi?.status?.phase],
    ["Node", vmi?.status?.nodeName],
    ["Created", `${vm.metadata.creationTimestamp} (${age(vm.metadata.creationTimestamp)} ago)`],
    ["Instancetype", vm.spec?.instancetype?.name],
    ["Preference", vm.spec?.preference?.name],
  ].filter(([, v]) => v);
  const volumes = new Map((spec.volumes || []).map((v) => [v.name, v]));
  const source = (v) => Object.keys(v || {}).find((k) => k !== "name") || "";
  const interfaces = new Map((vmi?.status?.interfaces || []).map((i) => [i.name, i]));
  panel.replaceChildren(
    h("dl", { className: "facts" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("h2", {}, "Disks"),
    h(
      "table",
      {},
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Name"), h("th", { scope: "col" }, "Bus"), h("th", { scope: "col" }, "Source"))),
      h(
        "tbody",
        {},
        (spec.domain?.devices?.disks || []).map((d) =>
          h("tr", {}, h("td", {}, d.name), h("td", {}, d.disk?.bus || d.cdrom?.bus || ""), h("td", {}, source(volumes.get(d.name)))),
        ),
      ),
    ),
    h("h2", {}, "Interfaces"),
    h(
      "table",
      {},
      h("thead", {}, h("tr", {}, ["Name", "MAC", "IP"].map((t) => h("th", { scope: "col" }, t)))),
      h(
        "tbody",
        {},
        (spec.domain?.devices?.interfaces || []).map((i) =>
          h("tr", {}, h("td", {}, i.name), h("td", {}, interfaces.get(i.name)?.mac || i.macAddress || ""), h("td", {}, interfaces.get(i.name)?.ipAddress || "")),
        ),
      ),
    ),
  );
}

function events(panel, namespace, name) {
  const body = h("tbody");
  panel.replaceChildren(
    h(
      "table",
      { "aria-label": "Events" },
      h("thead", {}, h("tr", {}, ["Type", "Reason", "Object", "Message", "Last seen"].map((t) => h("th", { scope: "col" }, t)))),
      body,
    ),
  );
  const selector = encodeURIComponent(`involvedObject.name=${name}`);
  const watch = listWatch(`/api/v1/namespaces/${namespace}/events?fieldSelector=${selector}`, (items) => {
    const when = (e) => e.lastTimestamp || e.eventTime || e.metadata.creationTimestamp || "";
    body.replaceChildren(
      ...[...items.values()]
        .sort((a, b) => when(b).localeCompare(when(a)))
        .map((e) =>
          h(
            "tr",
            {},
            h("td", {}, e.type),
            h("td", {}, e.reason),
            h("td", {}, `${e.involvedObject?.kind}/${e.involvedObject?.name}`),
            h("td", {}, e.message),
            h("td", {}, age(when(e))),
          ),
        ),
    );
  });
  return () => watch.stop();
}

async function yamlEditor(panel, path) {
  const errors = h("div", { id: "yaml-errors", className: "form-error", role: "alert" });
  const editor = annotatedTextarea({ id: "yaml", spellcheck: "false", rows: 24, "aria-describedby": "yaml-errors" });
  const text = editor.text;
  const save = h("button", { type: "button", onclick: submit }, "Save");
  const reload = h("button", { type: "button", onclick: load }, "Reload");
  // The server's refusal goes right above the editor, where it is seen without scrolling, and each cause also under
  // its field's line in the text.
  panel.replaceChildren(h("label", { for: "yaml" }, "VirtualMachine YAML"), errors, h("div", { className: "actions" }, save, reload), editor.wrapper);

  function show(value, bad = []) {
    text.value = value;
    editor.setBadLines(bad);
  }
  async function load() {
    errors.replaceChildren();
    try {
      const object = await get(path);
      delete object.metadata.managedFields;
      show(stringify(object));
    } catch (error) {
      errors.replaceChildren(h("p", {}, error.message));
    }
  }
  async function submit() {
    errors.replaceChildren();
    let object;
    try {
      object = parse(text.value);
    } catch (error) {
      errors.replaceChildren(h("p", {}, `Not valid YAML: ${error.message}`));
      return;
    }
    try {
      const saved = await request("PUT", path, object);
      delete saved.metadata.managedFields;
      show(stringify(saved));
      notify("Saved", "ok");
    } catch (error) {
      const causes = error instanceof ApiError ? error.status.details?.causes || [] : [];
      const annotated = annotate(text.value, causes);
      show(annotated.text, annotated.bad);
      errors.replaceChildren(
        h("p", { "data-code": error.code || "" }, `${error.code || ""} ${error.message}`.trim()),
        causes.length ? h("ul", {}, causes.map((c) => causeItem(c))) : null,
      );
    }
  }
  // A cause's field (spec.template.spec.domain.devices.disks[0].name) located in the text: its line, and a button
  // that selects it in the editor.
  function causeItem(cause) {
    const range = fieldRange(text.value, cause.field || "");
    const line = range ? text.value.slice(0, range[0]).split("\n").length : 0;
    const goTo = () => {
      text.focus();
      text.setSelectionRange(range[0], range[1]);
      // Selecting does not scroll a textarea: put the line near the top.
      text.scrollTop = Math.max(0, (line - 3) * (Number.parseFloat(getComputedStyle(text).lineHeight) || 18));
    };
    return h(
      "li",
      {},
      h("code", {}, cause.field || ""),
      " ",
      cause.message || "",
      line ? [" ", h("button", { type: "button", className: "link", onclick: goTo }, `line ${line}`)] : null,
    );
  }
  await load();
}
