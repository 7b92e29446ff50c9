// VirtualMachinePools and VirtualMachineInstanceReplicaSets: desired, current and ready replicas, scaled through
// their /scale subresource as `kubectl scale` does. Rows are updated in place so a number being typed survives.
import { listWatch, request } from "./api.js";
import { age, h, notify } from "./dom.js";

const KINDS = [
  { title: "VirtualMachinePools", path: "/apis/pool.kubevirt.io/v1beta1", plural: "virtualmachinepools", what: "pools" },
  { title: "VirtualMachineInstanceReplicaSets", path: "/apis/kubevirt.io/v1", plural: "virtualmachineinstancereplicasets", what: "replica sets" },
];

export function scaledPage(root) {
  root.replaceChildren(h("h1", {}, "Pools and replica sets"));
  const watches = KINDS.map((kind) => scaledTable(root, kind));
  return () => watches.forEach((watch) => watch.stop());
}

function scaledTable(root, kind) {
  const body = h("tbody");
  const empty = h("p", { className: "empty" }, "Loading…");
  root.append(
    h("h2", {}, kind.title),
    empty,
    h(
      "div",
      { className: "table-scroll" },
      h(
        "table",
        { "aria-label": kind.title },
        h("thead", {}, h("tr", {}, ["Name", "Namespace", "Desired", "Current", "Ready", "Age", "Scale"].map((t) => h("th", { scope: "col" }, t)))),
        body,
      ),
    ),
  );
  const rows = new Map();
  return listWatch(
    `${kind.path}/${kind.plural}`,
    (items) => {
      empty.textContent = items.size ? "" : `No ${kind.what}.`;
      for (const [key, row] of rows) {
        if (!items.has(key)) {
          row.element.remove();
          rows.delete(key);
        }
      }
      for (const [key, obj] of items) {
        let row = rows.get(key);
        if (!row) {
          row = newRow(kind, obj);
          rows.set(key, row);
          body.append(row.element);
        }
        row.desired.textContent = String(obj.spec?.replicas ?? 1);
        row.current.textContent = String(obj.status?.replicas ?? 0);
        row.ready.textContent = String(obj.status?.readyReplicas ?? 0);
        row.age.textContent = age(obj.metadata.creationTimestamp);
      }
    },
    (error) => notify(`${kind.what}: ${error.message}`),
  );
}

function newRow(kind, obj) {
  const { name, namespace } = obj.metadata;
  const cell = (field) => h("td", { "data-field": field });
  const row = { desired: cell("desired"), current: cell("current"), ready: cell("ready"), age: h("td") };
  const replicas = h("input", { type: "number", min: "0", value: String(obj.spec?.replicas ?? 1), "aria-label": `Replicas of ${name}` });
  const scale = async (event) => {
    event.preventDefault();
    const wanted = Number.parseInt(replicas.value, 10);
    if (!Number.isInteger(wanted) || wanted < 0) {
      notify(`Replicas of ${name} must be a whole number, 0 or more.`);
      return;
    }
    try {
      const path = `${kind.path}/namespaces/${encodeURIComponent(namespace)}/${kind.plural}/${encodeURIComponent(name)}/scale`;
      await request("PATCH", path, { spec: { replicas: wanted } }, "application/merge-patch+json");
      notify(`Scaled ${name} to ${wanted}.`, "ok");
    } catch (error) {
      notify(`Scaling ${name}: ${error.message}`);
    }
  };
  row.element = h(
    "tr",
    { [`data-${kind.plural === "virtualmachinepools" ? "pool" : "replicaset"}`]: `${namespace}/${name}` },
    h("td", {}, name),
    h("td", {}, namespace),
    row.desired,
    row.current,
    row.ready,
    row.age,
    h("td", {}, h("form", { className: "inline-form", noValidate: true, onsubmit: scale }, replicas, h("button", { type: "submit" }, "Scale"))),
  );
  return row;
}
