// remindful dashboard: the charts (data from the page's #chart-data JSON) and confirmations.
// No inline scripts: the pages' Content-Security-Policy allows only files from /static.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  // The session's path, for the sign-in page at "/" to send this browser back here (a bookmark of
  // the server's address works). localStorage is per origin, port included: no other server reads it.
  const home = document.body.dataset.root;
  if (home && /^\/s\/[A-Za-z0-9_-]{20,64}$/.test(home)) {
    try { localStorage.setItem("remindful.home", home + "/"); } catch (e) { /* storage off: no bookmark */ }
  }
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
  const source = document.getElementById("chart-data");
  if (!source || typeof Chart === "undefined") return;
  const data = JSON.parse(source.textContent);
  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;
  const palette = ["#3559d6", "#e07b39", "#3a9d5d", "#9b59b6", "#2f8fa3", "#d4ac0d"];
  const draw = {
    per_day: (canvas, rows) => new Chart(canvas, {
      type: "bar",
      data: { labels: rows.map((r) => r.day.slice(5)), datasets: [{ label: "memories captured", data: rows.map((r) => r.count), backgroundColor: "#3559d6" }] },
      options: { plugins: { legend: { display: false } }, scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
    }),
    by_type: (canvas, counts) => new Chart(canvas, {
      type: "doughnut",
      data: { labels: Object.keys(counts), datasets: [{ data: Object.values(counts), backgroundColor: palette }] },
      options: { plugins: { legend: { position: "right" } } },
    }),
    kinds: (canvas, rows) => new Chart(canvas, {
      type: "bar",
      data: {
        labels: rows.map((r) => `${r.name} (${r.count})`),
        datasets: [{ label: "success rate %", data: rows.map((r) => Math.round(100 * r.rate)),
                     backgroundColor: rows.map((r) => (r.rate <= 0.6 ? "#c0392b" : r.rate >= 0.9 ? "#3a9d5d" : "#e0a030")) }],
      },
      options: { indexAxis: "y", plugins: { legend: { display: false } }, scales: { x: { min: 0, max: 100 } } },
    }),
  };
  for (const canvas of document.querySelectorAll("canvas[data-chart]")) {
    const name = canvas.dataset.chart;
    if (draw[name] && data[name] !== undefined) draw[name](canvas, data[name]);
  }
  document.body.dataset.chartsReady = "true";
});
