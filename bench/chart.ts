/**
 * The report's chart: one grouped bar chart per workload figure (median rate per system
 * and block size), drawn by Vega-Lite and rendered to SVG by Vega's headless View (no browser, no
 * native canvas). vega and vega-lite are ES modules with top-level await, so they are loaded with a
 * real dynamic import (TypeScript would otherwise turn import() into require()).
 */

export interface ChartRow {
  /** One panel per value, e.g. 'hot-read: read (GB/s)'. */
  panel: string;
  size: string;
  system: string;
  value: number;
}

const dynamicImport = new Function('specifier', 'return import(specifier)') as (specifier: string) => Promise<unknown>;

interface VegaLite {
  compile(spec: object): { spec: object };
}
interface Vega {
  parse(spec: object): unknown;
  View: new (runtime: unknown, options: { renderer: string }) => { toSVG(): Promise<string>; finalize(): void };
}

/** Renders the rows as SVG: panels stacked, bars grouped by block size, one colour per system (shared). */
export async function renderChartSvg(title: string, rows: ChartRow[], systemOrder: string[]): Promise<string> {
  const vl = (await dynamicImport('vega-lite')) as VegaLite;
  const vega = (await dynamicImport('vega')) as Vega;
  const panels = [...new Set(rows.map((r) => r.panel))];
  const sizes = [...new Set(rows.map((r) => r.size))];
  const systems = systemOrder.filter((s) => rows.some((r) => r.system === s));
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: { text: title, anchor: 'start' },
    config: { font: 'sans-serif', axis: { labelFontSize: 11, titleFontSize: 11 }, title: { fontSize: 14 } },
    resolve: { scale: { color: 'shared' } },
    columns: 2,
    concat: panels.map((panel) => ({
      title: { text: panel, fontSize: 12 },
      width: 320,
      height: 160,
      data: { values: rows.filter((r) => r.panel === panel) },
      encoding: {
        x: { field: 'size', type: 'nominal', sort: sizes, title: 'block size', axis: { labelAngle: 0 } },
        xOffset: { field: 'system', type: 'nominal', sort: systems },
        y: { field: 'value', type: 'quantitative', title: panel.replace(/^.*\(([^)]+)\)$/, '$1') },
        color: { field: 'system', type: 'nominal', sort: systems, scale: { scheme: 'tableau10' }, legend: { title: 'system' } },
      },
      layer: [
        { mark: { type: 'bar' } },
        {
          mark: { type: 'text', dy: -4, fontSize: 8, angle: 0 },
          encoding: { text: { field: 'value', type: 'quantitative', format: panel.endsWith('(GB/s)') ? '.2f' : '.3~s' } },
        },
      ],
    })),
  };
  const compiled = vl.compile(spec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}
