import { useEffect, useMemo, useRef, useState } from "react";
import {
  Background,
  Controls,
  Handle,
  Position,
  ReactFlow,
  useReactFlow,
  useStore,
  type Connection,
  type Edge,
  type EdgeChange,
  type Node,
  type NodeChange,
  type NodeProps,
} from "@xyflow/react";
import "@xyflow/react/dist/style.css";
import { canConnect, handleOf, toCanvas, TYPE_NAMES, wayName, wayOfHandle, type Point, type Step, type StepData, type Transition, type Way } from "./graph";

type Props = {
  steps: Step[];
  transitions: Transition[];
  problems: Record<string, string[]>;
  /** Template names by id, for the summaries of send steps. */
  templates: Record<string, string>;
  frozen: boolean;
  selected: string | null;
  onSelect: (id: string | null) => void;
  onConnect: (from: string, way: Way, to: string) => void;
  onDeleteStep: (id: string) => void;
  onDeleteTransition: (id: string) => void;
  /** A step was put somewhere (a drag ended, or arrow keys paused): store its position. */
  onMoveStep: (id: string, position: Point) => void;
};

/** How long arrow-key moves pause before the step's new place is stored. */
const SETTLE_MS = 400;

type StepNodeType = Node<StepData, "step">;

/** A step on the canvas: its way in on top, a handle per way out at the bottom. */
function StepNode({ data }: NodeProps<StepNodeType>) {
  return (
    <div className={`wf-node wf-${data.type.toLowerCase()}${data.problems.length ? " wf-bad" : ""}`}>
      <Handle type="target" position={Position.Top} id="in" title={`Way in to ${data.label}`} />
      <strong>{data.label}</strong>
      <span className="wf-type">
        {TYPE_NAMES[data.type]}
        {data.entry ? " · entry step" : ""}
      </span>
      <span className="wf-summary">{data.summary}</span>
      {data.problems.length > 0 && <span className="wf-problem">{data.problems.length} problem{data.problems.length > 1 ? "s" : ""}</span>}
      {data.ways.map((w, i) => {
        const left = `${((i + 1) * 100) / (data.ways.length + 1)}%`;
        return (
          <div key={handleOf(w)}>
            {w && (
              <span className="wf-way" style={{ left }}>
                {w}
              </span>
            )}
            <Handle type="source" position={Position.Bottom} id={handleOf(w)} style={{ left }} title={`Way out “${wayName(w)}” of ${data.label}`} />
          </div>
        );
      })}
    </div>
  );
}

const nodeTypes = { step: StepNode };

/** Keeps every step in view when steps are added or removed and when the canvas narrows or widens. */
function FitView({ count }: { count: number }) {
  const { fitView } = useReactFlow();
  const width = useStore((s) => s.width);
  useEffect(() => {
    void fitView({ maxZoom: 1, padding: 0.1 });
  }, [fitView, count, width]);
  return null;
}

/**
 * The workflow drawn with React Flow: drag from a way out to a step to connect, select a step
 * to edit it, Delete or Backspace removes the selected step or transition. Steps are drawn where
 * they were put (the automatic layout for those never placed); a step dragged, or moved with
 * the arrow keys, is stored where it ends.
 */
export function Canvas({ steps, transitions, problems, templates, frozen, selected, onSelect, onConnect, onDeleteStep, onDeleteTransition, onMoveStep }: Props) {
  const [moved, setMoved] = useState<Record<string, Point>>({});
  const [measured, setMeasured] = useState<Record<string, { width: number; height: number }>>({});
  const [selectedEdge, setSelectedEdge] = useState<string | null>(null);
  const box = useRef<HTMLDivElement>(null);
  // A pending store of a step's position, by step: each key press moves a step a little.
  const settling = useRef(new Map<string, number>());
  const model = useMemo(() => toCanvas(steps, transitions, problems, moved, templates), [steps, transitions, problems, moved, templates]);
  const nodes: StepNodeType[] = model.nodes.map((n) => ({ ...n, measured: measured[n.id], selected: n.id === selected }));
  const edges: Edge[] = model.edges.map((e) => ({ ...e, selected: e.id === selectedEdge, className: e.label ? `wf-edge-${e.label}` : undefined }));

  function nodesChange(changes: NodeChange<StepNodeType>[]) {
    const m = { ...measured };
    const p = { ...moved };
    let next = selected;
    for (const c of changes) {
      if (c.type === "dimensions" && c.dimensions) m[c.id] = c.dimensions;
      if (c.type === "position" && c.position) {
        // `dragging: false` is the end of a drag or an arrow key's move: the step stays (and is
        // stored) at whole coordinates.
        const at = c.dragging === false ? { x: Math.round(c.position.x), y: Math.round(c.position.y) } : c.position;
        p[c.id] = at;
        if (c.dragging === false) settle(c.id, at);
      }
      if (c.type === "select") {
        if (c.selected) next = c.id;
        else if (c.id === next) next = null;
      }
    }
    if (changes.some((c) => c.type === "dimensions")) setMeasured(m);
    if (changes.some((c) => c.type === "position")) setMoved(p);
    if (next !== selected) onSelect(next);
  }

  function settle(id: string, position: Point) {
    window.clearTimeout(settling.current.get(id));
    settling.current.set(
      id,
      window.setTimeout(() => {
        settling.current.delete(id);
        onMoveStep(id, position);
      }, SETTLE_MS),
    );
  }

  function edgesChange(changes: EdgeChange[]) {
    for (const c of changes) {
      if (c.type === "select") setSelectedEdge((s) => (c.selected ? c.id : s === c.id ? null : s));
    }
  }

  const valid = (c: Connection | Edge) =>
    !frozen && !!c.source && !!c.target && canConnect(steps, transitions, c.source, wayOfHandle(c.sourceHandle), c.target);

  return (
    <div className="wf-canvas" ref={box}>
      <ReactFlow<StepNodeType, Edge>
        nodes={nodes}
        edges={edges}
        nodeTypes={nodeTypes}
        onNodesChange={nodesChange}
        onEdgesChange={edgesChange}
        onConnect={(c) => {
          if (valid(c)) onConnect(c.source, wayOfHandle(c.sourceHandle), c.target);
        }}
        isValidConnection={valid}
        onDelete={({ nodes: gone, edges: cut }) => {
          // A deleted step takes its transitions with it on the server.
          if (gone.length) gone.forEach((n) => onDeleteStep(n.id));
          else cut.forEach((e) => onDeleteTransition(e.id));
        }}
        deleteKeyCode={frozen ? null : ["Delete", "Backspace"]}
        // The key deletes only while the focus is on the canvas, not from a button elsewhere.
        onBeforeDelete={async () => !!box.current?.contains(document.activeElement)}
        nodesConnectable={!frozen}
        fitView
        fitViewOptions={{ maxZoom: 1 }}
        minZoom={0.3}
        proOptions={{ hideAttribution: true }}
        aria-label="Workflow canvas"
      >
        <FitView count={steps.length} />
        <Background />
        <Controls showInteractive={false} />
      </ReactFlow>
    </div>
  );
}
