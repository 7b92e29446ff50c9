// Create a VM from a cluster instancetype and preference, booting a containerDisk, an existing DataVolume, a new
// DataVolume imported from a URL (a dataVolumeTemplate, as KubeVirt's), or a local image uploaded from this browser.
import { get, request, VM_API } from "./api.js";
import { h, notify } from "./dom.js";
import { uploadImage } from "./upload.js";

const INSTANCETYPES = "/apis/instancetype.kubevirt.io/v1beta1";
const SOURCES = {
  containerDisk: ["containerDisk image", "Image", "pykubevirt.local/demo-guest:1.0"],
  dataVolume: ["existing DataVolume", "DataVolume name", ""],
  http: ["new DataVolume from a URL", "Image URL (http or https)", "https://"],
  upload: ["upload a disk image (qcow2 or raw)", "", ""],
};

function field(id, label, control, help) {
  return h("div", { className: "field", id: `${id}-field` }, h("label", { for: id, id: `${id}-label` }, label), control, help ? h("p", { className: "help", id: `${id}-help` }, help) : null);
}

function mib(bytes) {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

export function createPage(root) {
  const name = h("input", { id: "vm-name", required: true, pattern: "[a-z0-9]([-a-z0-9]*[a-z0-9])?", autocomplete: "off" });
  const namespace = h("input", { id: "vm-namespace", value: "default", required: true });
  const instancetype = h("select", { id: "vm-instancetype", required: true });
  const preference = h("select", { id: "vm-preference" }, h("option", { value: "" }, "(none)"));
  const sourceKind = h("select", { id: "vm-source-kind", onchange: showSource }, Object.entries(SOURCES).map(([value, [text]]) => h("option", { value }, text)));
  const source = h("input", { id: "vm-source", required: true, value: SOURCES.containerDisk[2] });
  const file = h("input", { id: "vm-file", type: "file", accept: ".img,.qcow2,.raw,.iso,.gz,.xz" });
  const size = h("input", { id: "vm-size", value: "1Gi", pattern: "[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?" });
  const progress = h("progress", { id: "upload-progress", max: "100", value: "0", "aria-label": "Upload progress" });
  const stage = h("p", { id: "upload-stage", className: "help", "aria-live": "polite" });
  const running = h("input", { id: "vm-running", type: "checkbox", checked: true });
  const errors = h("div", { id: "create-errors", className: "form-error", role: "alert" });
  const create = h("button", { type: "submit" }, "Create");
  const sourceField = field("vm-source", SOURCES.containerDisk[1], source);
  const fileField = field("vm-file", "Disk image file", file, "Sent through the console to CDI's upload proxy, as virtctl image-upload.");
  const sizeField = field("vm-size", "DataVolume size", size, "At least the image's virtual size.");
  const progressField = h("div", { className: "field", id: "upload-field" }, h("label", { for: "upload-progress" }, "Upload"), progress, stage);
  const form = h(
    "form",
    { className: "create", onsubmit: submit },
    field("vm-name", "Name", name),
    field("vm-namespace", "Namespace", namespace),
    field("vm-instancetype", "Instancetype", instancetype, "A VirtualMachineClusterInstancetype: CPU and memory."),
    field("vm-preference", "Preference", preference),
    field("vm-source-kind", "Boot disk", sourceKind),
    sourceField,
    fileField,
    sizeField,
    progressField,
    h("div", { className: "field" }, h("label", { for: "vm-running" }, running, " Start it now")),
    create,
    errors,
  );
  root.replaceChildren(h("h1", {}, "Create a virtual machine"), form);
  showSource();

  Promise.all([get(`${INSTANCETYPES}/virtualmachineclusterinstancetypes`), get(`${INSTANCETYPES}/virtualmachineclusterpreferences`)])
    .then(([types, preferences]) => {
      instancetype.replaceChildren(...(types.items || []).map((t) => h("option", { value: t.metadata.name }, t.metadata.name)));
      preference.append(...(preferences.items || []).map((p) => h("option", { value: p.metadata.name }, p.metadata.name)));
      if (!(types.items || []).length) errors.textContent = "No cluster instancetypes exist yet.";
    })
    .catch((error) => (errors.textContent = error.message));

  function showSource() {
    const kind = sourceKind.value;
    const [, label, example] = SOURCES[kind];
    sourceField.hidden = kind === "upload";
    source.required = kind !== "upload";
    sourceField.querySelector("label").textContent = label;
    if (!source.value || Object.values(SOURCES).some(([, , e]) => e && e === source.value)) source.value = example;
    fileField.hidden = kind !== "upload";
    file.required = kind === "upload";
    sizeField.hidden = kind !== "upload" && kind !== "http";
    size.required = !sizeField.hidden;
    progressField.hidden = kind !== "upload";
  }

  function rootVolume(diskName) {
    const kind = sourceKind.value;
    if (kind === "containerDisk") return { name: "rootdisk", containerDisk: { image: source.value } };
    if (kind === "dataVolume") return { name: "rootdisk", dataVolume: { name: source.value } };
    return { name: "rootdisk", dataVolume: { name: diskName } };
  }

  async function submit(event) {
    event.preventDefault();
    errors.replaceChildren();
    const kind = sourceKind.value;
    const ns = namespace.value;
    const diskName = `${name.value}-rootdisk`;
    const storage = { resources: { requests: { storage: size.value } } };
    const vm = {
      apiVersion: "kubevirt.io/v1",
      kind: "VirtualMachine",
      metadata: { name: name.value, namespace: ns },
      spec: {
        runStrategy: running.checked ? "Always" : "Halted",
        instancetype: { kind: "VirtualMachineClusterInstancetype", name: instancetype.value },
        preference: preference.value ? { kind: "VirtualMachineClusterPreference", name: preference.value } : undefined,
        dataVolumeTemplates: kind === "http" ? [{ metadata: { name: diskName }, spec: { source: { http: { url: source.value } }, storage } }] : undefined,
        template: {
          spec: {
            domain: { devices: { disks: [{ name: "rootdisk", disk: {} }], interfaces: [{ name: "default", bridge: {} }] } },
            networks: [{ name: "default", pod: {} }],
            volumes: [rootVolume(diskName)],
          },
        },
      },
    };
    create.disabled = true;
    try {
      if (kind === "upload") {
        const image = file.files[0];
        progress.value = 0;
        await uploadImage(ns, diskName, size.value, image, (text) => (stage.textContent = text), (sent, total) => {
          progress.value = total ? Math.floor((sent * 100) / total) : 0;
          stage.textContent = `Uploading ${image.name}: ${mib(sent)} of ${mib(total)}`;
        });
        stage.textContent = `Uploaded ${image.name} (${mib(image.size)}) into DataVolume ${ns}/${diskName}; CDI converts it now.`;
      }
      await request("POST", `${VM_API}/namespaces/${encodeURIComponent(ns)}/virtualmachines`, vm);
      if (kind === "upload") {
        // Stay with the finished upload; the VM and the DataVolume's processing are one click away.
        notify(`Created ${ns}/${name.value}`, "ok");
        stage.append(" ", h("a", { href: `#/vm/${ns}/${name.value}/overview` }, `Open ${ns}/${name.value}`), " · ", h("a", { href: "#/datavolumes" }, "DataVolumes"));
        return;
      }
      notify(`Created ${ns}/${name.value}`, "ok");
      location.hash = `#/vm/${ns}/${name.value}/overview`;
    } catch (error) {
      const causes = error.status?.details?.causes || [];
      errors.replaceChildren(
        h("p", {}, `${error.code || ""} ${error.message}`.trim()),
        causes.length ? h("ul", {}, causes.map((c) => h("li", {}, h("code", {}, c.field || ""), " ", c.message || ""))) : null,
      );
    } finally {
      create.disabled = false;
    }
  }
}
