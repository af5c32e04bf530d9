//! The picture as one self-contained HTML page (no network): the SVG inline, pan by
//! dragging and zoom with the wheel (the SVG's `viewBox`), and a side panel that shows
//! a clicked op's attributes and what is folded into it, or a clicked kernel's loop IR
//! and time. The data rides in the page as JSON; when the script has wired every node it
//! sets `data-drawn` on `<body>` to the number of ops (what the browser test reads).

use serde_json::json;

use super::scene::Scene;
use super::svg::{KernelTimes, escape};
use crate::units::human_us;

const SCRIPT: &str = r#"
(function () {
  const data = JSON.parse(document.getElementById('kiln-data').textContent);
  const svg = document.querySelector('#canvas svg');
  const panel = document.getElementById('panel');
  const vb = svg.viewBox.baseVal;
  let view = {x: vb.x, y: vb.y, w: vb.width, h: vb.height};
  svg.removeAttribute('width');
  svg.removeAttribute('height');
  // Start readable: the whole width (at least 700 units), from the top, at the canvas's
  // aspect ratio; pan down for the rest.
  const box = svg.getBoundingClientRect();
  if (box.width > 0 && box.height > 0) {
    view.w = Math.max(view.w, 700);
    view.h = view.w * box.height / box.width;
    view.x = vb.x + (vb.width - view.w) / 2;
  }
  const apply = () => svg.setAttribute('viewBox', `${view.x} ${view.y} ${view.w} ${view.h}`);
  apply();
  svg.addEventListener('wheel', (ev) => {
    ev.preventDefault();
    const r = svg.getBoundingClientRect();
    const fx = (ev.clientX - r.left) / r.width, fy = (ev.clientY - r.top) / r.height;
    const k = ev.deltaY > 0 ? 1.15 : 1 / 1.15;
    const px = view.x + fx * view.w, py = view.y + fy * view.h;
    view.w *= k; view.h *= k;
    view.x = px - fx * view.w; view.y = py - fy * view.h;
    apply();
  }, {passive: false});
  let drag = null;
  svg.addEventListener('mousedown', (ev) => { drag = {x: ev.clientX, y: ev.clientY, vx: view.x, vy: view.y}; });
  window.addEventListener('mouseup', () => { drag = null; });
  window.addEventListener('mousemove', (ev) => {
    if (!drag) return;
    const r = svg.getBoundingClientRect();
    view.x = drag.vx - (ev.clientX - drag.x) * view.w / r.width;
    view.y = drag.vy - (ev.clientY - drag.y) * view.h / r.height;
    apply();
  });
  const text = (tag, content, cls) => {
    const e = document.createElement(tag);
    e.textContent = content;
    if (cls) e.className = cls;
    return e;
  };
  const showKernel = (k, opIndex) => {
    const kernel = data.kernels[k];
    panel.replaceChildren();
    panel.appendChild(text('h2', kernel.name));
    if (kernel.time_us !== null) panel.appendChild(text('p', `time: ${kernel.time}`));
    if (opIndex !== null) {
      const op = kernel.ops[opIndex];
      panel.appendChild(text('h3', `${op.op} → ${op.result}`));
      const ul = document.createElement('ul');
      for (const d of op.details) ul.appendChild(text('li', d));
      panel.appendChild(ul);
    }
    panel.appendChild(text('h3', 'loop IR'));
    panel.appendChild(text('pre', kernel.loop));
  };
  let wired = 0;
  document.querySelectorAll('g.node').forEach((g) => {
    const k = Number(g.dataset.kernel), i = Number(g.dataset.op);
    g.addEventListener('click', (ev) => { ev.stopPropagation(); showKernel(k, i); });
    wired += 1;
  });
  document.querySelectorAll('g.cluster').forEach((g) => {
    g.addEventListener('click', () => showKernel(Number(g.dataset.kernel), null));
  });
  document.body.dataset.drawn = String(wired);
})();
"#;

const STYLE: &str = "\
body{margin:0;display:flex;height:100vh;font-family:sans-serif}\
#canvas{flex:1;overflow:hidden;cursor:grab;background:#fbfbfd}\
#canvas svg{width:100%;height:100%}\
#panel{width:34%;overflow:auto;border-left:1px solid #ccd;padding:0 12px;font-size:13px}\
#panel pre{font-size:11px;white-space:pre;overflow:auto;background:#f4f4f8;padding:6px}\
g.node,g.cluster{cursor:pointer}";

/// The HTML page: `svg` (from [`super::svg::render`]) with `loops[k]`, the loop IR of
/// kernel k, and the times, for the side panel.
pub fn render(
    title: &str,
    scene: &Scene,
    svg: &str,
    loops: &[String],
    times: Option<&KernelTimes>,
) -> String {
    let kernels: Vec<serde_json::Value> = scene
        .kernels()
        .map(|(index, unit)| {
            let time = times.and_then(|t| t.time_us.get(index).copied());
            json!({
                "name": unit.title,
                "loop": loops.get(index).cloned().unwrap_or_default(),
                "time_us": time,
                "time": time.map(human_us),
                "ops": unit.ops.iter().map(|op| json!({
                    "op": op.op, "details": op.details, "result": op.result,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let data = json!({ "kernels": kernels }).to_string();
    // JSON inside <script>: `</` must not end the element early.
    let data = data.replace("</", "<\\/");
    let title = escape(title);
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>\
         <style>{STYLE}</style></head>\n<body>\n<div id=\"canvas\">\n{svg}</div>\n\
         <div id=\"panel\"><h2>{title}</h2><p>Drag to pan, scroll to zoom; click an op or \
         a kernel for its attributes and loop IR.</p></div>\n\
         <script type=\"application/json\" id=\"kiln-data\">{data}</script>\n\
         <script>{SCRIPT}</script>\n</body></html>\n"
    )
}
