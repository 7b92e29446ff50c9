// DataVolumes: phase and import or upload processing progress (status.progress), kept current by a watch.
import { listWatch } from "./api.js";
import { age, h, notify } from "./dom.js";

export function dataVolumesPage(root) {
  const body = h("tbody");
  const empty = h("p", { className: "empty" }, "Loading…");
  root.replaceChildren(
    h("h1", {}, "DataVolumes"),
    empty,
    h(
      "div",
      { className: "table-scroll" },
      h(
        "table",
        { "aria-label": "DataVolumes" },
        h("thead", {}, h("tr", {}, ["Name", "Namespace", "Phase", "Progress", "Source", "Size", "Age"].map((t) => h("th", { scope: "col" }, t)))),
        body,
      ),
    ),
  );
  const watch = listWatch(
    "/apis/cdi.kubevirt.io/v1beta1/datavolumes",
    (items) => {
      empty.textContent = items.size ? "" : "No DataVolumes.";
      body.replaceChildren(
        ...[...items.values()].map((dv) => {
          const progress = Number.parseFloat(dv.status?.progress || "") || 0;
          const source = Object.keys(dv.spec?.source || {})[0] || (dv.spec?.sourceRef ? "sourceRef" : "");
          const size = dv.spec?.storage?.resources?.requests?.storage || dv.spec?.pvc?.resources?.requests?.storage || "";
          return h(
            "tr",
            { "data-dv": `${dv.metadata.namespace}/${dv.metadata.name}` },
            h("td", {}, dv.metadata.name),
            h("td", {}, dv.metadata.namespace),
            h("td", { "data-field": "phase" }, dv.status?.phase || ""),
            h("td", { "data-field": "progress" }, h("progress", { max: "100", value: String(progress), "aria-label": `${dv.metadata.name} progress` }), ` ${dv.status?.progress || ""}`),
            h("td", {}, source),
            h("td", {}, size),
            h("td", {}, age(dv.metadata.creationTimestamp)),
          );
        }),
      );
    },
    (error) => notify(`DataVolumes: ${error.message}`),
  );
  return () => watch.stop();
}
