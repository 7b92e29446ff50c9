// A local disk image into a new upload DataVolume, the way `virtctl image-upload dv` does it: create the DataVolume,
// wait for its upload server (phase UploadReady), get an UploadTokenRequest's token, and POST the file to CDI's
// upload path, which the console streams on to the upload proxy. The browser reports the bytes sent as they go.
import { get, request } from "./api.js";

const DATAVOLUMES = "/apis/cdi.kubevirt.io/v1beta1/namespaces";
const TOKENS = "/apis/upload.cdi.kubevirt.io/v1beta1/namespaces";
const READY_SECONDS = 180;

export function uploadDataVolume(namespace, name, size) {
  return {
    apiVersion: "cdi.kubevirt.io/v1beta1",
    kind: "DataVolume",
    metadata: { name, namespace },
    spec: { source: { upload: {} }, storage: { resources: { requests: { storage: size } } } },
  };
}

// onStage(text) describes the step; onProgress(sent, total) follows the upload itself.
export async function uploadImage(namespace, name, size, file, onStage, onProgress) {
  const ns = encodeURIComponent(namespace);
  onStage(`Creating DataVolume ${namespace}/${name}…`);
  await request("POST", `${DATAVOLUMES}/${ns}/datavolumes`, uploadDataVolume(namespace, name, size));
  onStage("Waiting for the upload server…");
  const deadline = Date.now() + READY_SECONDS * 1000;
  for (;;) {
    const dv = await get(`${DATAVOLUMES}/${ns}/datavolumes/${encodeURIComponent(name)}`);
    if (dv.status?.phase === "UploadReady") break;
    if (dv.status?.phase === "Failed") throw new Error(`DataVolume ${namespace}/${name} failed`);
    if (Date.now() > deadline) throw new Error(`the upload server for ${namespace}/${name} was not ready in ${READY_SECONDS} s`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  const answer = await request("POST", `${TOKENS}/${ns}/uploadtokenrequests`, {
    apiVersion: "upload.cdi.kubevirt.io/v1beta1",
    kind: "UploadTokenRequest",
    metadata: { generateName: "token-for-webconsole-", namespace },
    spec: { pvcName: name },
  });
  const token = answer.status?.token;
  if (!token) throw new Error("no upload token returned");
  onStage(`Uploading ${file.name}…`);
  await send(file, token, onProgress);
}

// XMLHttpRequest, not fetch: only it reports the progress of a request body.
function send(file, token, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/v1beta1/upload");
    xhr.setRequestHeader("Authorization", `Bearer ${token}`);
    xhr.setRequestHeader("X-Console", "1");
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    xhr.upload.onprogress = (event) => onProgress(event.loaded, event.lengthComputable ? event.total : file.size);
    xhr.onload = () => {
      if (xhr.status === 200) {
        onProgress(file.size, file.size);
        resolve();
      } else reject(new Error(`the upload proxy answered ${xhr.status}: ${xhr.responseText.trim()}`));
    };
    xhr.onerror = () => reject(new Error("the upload was cut off"));
    xhr.send(file);
  });
}
