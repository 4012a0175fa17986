"""A stored run as ONE self-contained HTML file: graph, details on click, budget and score timeline.

The page needs no network: its CSS and its small script are inlined here (no CDN, no package of
browser code), and a Content-Security-Policy forbids every fetch and every script but ours (by
hash), so a thought that smuggled markup past the escaping still could not run or load anything.
Model text never becomes markup: the run travels as JSON inside a `<script type="application/json">`
block with `<`, `>` and `&` written as \\u escapes, and the script puts it on the page with
`textContent` only. Control and bidi characters are shown as escapes (`terminal_text`), so what
the reader sees is what the model wrote.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from ..graph import NodeStatus, ThoughtGraph
from ..search.agent.processors import EXTRA as AGENT
from ..search.context import EXTRA as CONTEXT
from ..search.grounding_step import EXTRA as GROUNDING
from ..search.recursive.solver import EXTRA as RECURSION
from ..search.research.explorer import EXTRA as RESEARCH
from .terminal import terminal_text

#: Layout grid: pixels between depths (rows) and between neighbours in a row.
ROW_GAP = 90
COLUMN_GAP = 36

#: Above this many nodes the page opens with pruned, failed and cancelled branches folded (a "+N" badge).
FOLD_ABOVE = 200

#: node.extra keys the panel shows in their own sections; the rest go under "other metadata".
_SECTIONS = (GROUNDING.grounding, RESEARCH.evidence, RECURSION.recursion, AGENT.tool_calls, RESEARCH.hypothesis,
             AGENT.text, CONTEXT.rejected, AGENT.error)


@dataclass(frozen=True, slots=True)
class CallPoint:
    """One recorded model exchange as the timeline plots it."""

    purpose: str
    input_tokens: int
    output_tokens: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RunPicture:
    """What the page shows of one run: its header, its graph and result, its calls and controller report."""

    run_id: str
    status: str
    task: str
    model: str
    problem: str
    graph: ThoughtGraph
    result: dict[str, Any] = field(default_factory=dict)
    calls: Sequence[CallPoint] = ()
    #: The run's token budget as it started (None: unlimited); the controller may have raised it.
    token_limit: int | None = None


def _clean(value: Any) -> Any:
    """Plain data with every string made visible-safe (controls and bidi characters as escapes)."""
    if isinstance(value, str):
        return terminal_text(value, newlines=True)
    if isinstance(value, dict):
        return {str(_clean(k)): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON.parse takes no NaN or Infinity
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return terminal_text(str(value), newlines=True)


def row_order(graph: ThoughtGraph) -> dict[int, int]:
    """Each node's place in its depth's row, each row ordered by its primary parent's place.

    The page packs the nodes it shows in this order, so folding a branch away never reorders the rest.
    """
    rows: dict[int, list[int]] = {}
    for node in graph:
        rows.setdefault(node.depth, []).append(node.id)
    order: dict[int, int] = {}
    for depth in sorted(rows):
        ids = rows[depth]

        def parent_order(nid: int) -> tuple[float, int]:
            parent = graph.primary_parent(nid)
            return (order.get(parent, -1) if parent is not None else -1, nid)

        ids.sort(key=parent_order)
        for column, nid in enumerate(ids):
            order[nid] = column
    return order


def picture_data(picture: RunPicture, best_path: Iterable[int] = (), goals: Iterable[int] = ()) -> dict[str, Any]:
    """The page's data: nodes with place and details, edges, the timeline and the controller's decisions."""
    graph = picture.graph
    best, goal_set = list(best_path), set(goals)
    best_set, best_edges = set(best), set(pairwise(best))
    columns = row_order(graph)
    nodes = []
    for node in graph:
        extra = dict(node.extra)
        kind = extra.get(AGENT.kind) if isinstance(extra.get(AGENT.kind), str) else node.kind.value
        nodes.append({
            "id": node.id, "col": columns[node.id], "depth": node.depth, "kind": kind, "base_kind": node.kind.value,
            "status": node.status.value, "score": node.score, "content": node.content,
            "best": node.id in best_set, "goal": node.id in goal_set, "tokens": node.cost_tokens,
            "parents": graph.parents(node.id), "parent": graph.primary_parent(node.id),
            "sections": {k: extra.pop(k) for k in _SECTIONS if k in extra},
            "other": {k: v for k, v in extra.items() if k != AGENT.kind},
        })
    edges = [{"src": e.src, "dst": e.dst, "kind": e.kind.value, "weight": e.weight,
              "best": (e.src, e.dst) in best_edges} for e in graph.edges]
    spent, tokens = 0, []
    for call in picture.calls:
        spent += call.input_tokens + call.output_tokens
        tokens.append({"tokens": spent, "purpose": call.purpose, "error": call.error})
    # Every score, and the best so far, in the order thoughts were made (node ids are creation order).
    best_so_far: float | None = None
    scores = []
    for node in graph:
        if node.score is not None and node.status is not NodeStatus.FAILED:
            best_so_far = node.score if best_so_far is None else max(best_so_far, node.score)
            scores.append({"node": node.id, "score": node.score, "best": best_so_far, "status": node.status.value})
    control = picture.result.get("control") or {}
    return _clean({
        "run": {"id": picture.run_id, "status": picture.status, "task": picture.task, "model": picture.model,
                "problem": picture.problem, "answer": picture.result.get("answer"),
                "stopped": picture.result.get("termination_reason"), "solved": picture.result.get("solved")},
        "nodes": nodes, "edges": edges, "tokens": tokens, "scores": scores,
        "limits": {"tokens": picture.token_limit},
        "decisions": control.get("decisions") or [],
        "control": {k: v for k, v in control.items() if k != "decisions"},
        "grid": {"row": ROW_GAP, "column": COLUMN_GAP}, "fold": len(graph) > FOLD_ABOVE,
    })


def _json_for_script(data: Any) -> str:
    """JSON safe inside a <script> block: nothing in it can close the block or open markup."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, default=str)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def to_html(picture: RunPicture, best_path: Iterable[int] = (), goals: Iterable[int] = ()) -> str:
    """The whole page: inlined CSS and script, the run as escaped JSON, a CSP allowing no network."""
    data = _json_for_script(picture_data(picture, best_path, goals))
    digest = base64.b64encode(hashlib.sha256(_SCRIPT.encode("utf-8")).digest()).decode("ascii")
    csp = (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
           "img-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'")
    return (_PAGE.replace("@CSP@", csp).replace("@STYLE@", _STYLE)
            .replace("@SCRIPT@", _SCRIPT).replace("@DATA@", data))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="@CSP@">
<title>thoughtloom run</title>
<style>@STYLE@</style>
</head>
<body>
<header><h1 id="title">thoughtloom run</h1><dl id="summary"></dl></header>
<main>
<section id="graph-pane"><div id="legend"></div>
<div id="toolbar"><input id="filter" type="search" placeholder="find: text, #id, kind or status" aria-label="find a thought"><span id="matches"></span>
<button id="zoom-out" title="zoom out">−</button><button id="zoom-in" title="zoom in">+</button><button id="zoom-fit">fit</button><button id="zoom-reset">100%</button>
<button id="expand-all">show every branch</button><button id="collapse-all">fold pruned / failed</button><span id="shown"></span></div>
<div id="graph-scroll"><svg id="graph" xmlns="http://www.w3.org/2000/svg"></svg></div></section>
<aside id="panel"><h2>Node</h2><p id="panel-hint">Click a node to see its thought, score, grounding evidence, contract and tool calls.</p><div id="details"></div></aside>
</main>
<section id="timeline-pane"><h2>Budget and score</h2><svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="960" height="220"></svg>
<h2>Controller decisions</h2><ol id="decisions"></ol><pre id="control"></pre></section>
<script type="application/json" id="run-data">@DATA@</script>
<script>@SCRIPT@</script>
</body>
</html>
"""

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{padding:8px 16px;background:#fff;border-bottom:1px solid #ddd}
h1{font-size:18px;margin:4px 0}h2{font-size:15px;margin:8px 0}
dl#summary{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:4px 0}
dl#summary dt{font-weight:600}dl#summary dd{margin:0;white-space:pre-wrap;word-break:break-word}
main{display:flex;gap:8px;padding:8px 16px}
#graph-pane{flex:1;min-width:0}#graph-scroll{overflow:auto;max-height:70vh;background:#fff;border:1px solid #ddd}
#panel{width:380px;flex:none;background:#fff;border:1px solid #ddd;padding:8px;max-height:75vh;overflow:auto}
#panel pre{white-space:pre-wrap;word-break:break-word;background:#f4f4f4;padding:6px;margin:4px 0}
#panel h3{font-size:13px;margin:10px 0 2px}
#legend span{display:inline-block;margin-right:12px;font-size:12px}
#legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle;border:1px solid #555}
#timeline-pane{padding:8px 16px}#timeline{background:#fff;border:1px solid #ddd}
.node{cursor:pointer}.node.selected .shape{stroke:#000;stroke-width:3}
.edge{fill:none;stroke:#999;stroke-width:1}.edge.best{stroke:#1e7e34;stroke-width:3}
.edge.contradiction{stroke:#c82333;stroke-dasharray:4 3}.edge.refinement{stroke-dasharray:2 3}
.shape.pruned{stroke-dasharray:4 3;opacity:.55}.shape.failed{stroke:#c82333;stroke-width:2.5}
.shape.cancelled{stroke:#b38600;stroke-dasharray:2 2}.shape.best{stroke:#1e7e34;stroke-width:3}
.shape.goal{stroke:#0b5d1e;stroke-width:4}
.mark{font-size:11px;pointer-events:none}
#decisions li{margin:2px 0}
#toolbar{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin:4px 0}#toolbar input{width:260px}
#matches,#shown{font-size:12px;color:#555}
.fold{cursor:pointer}.fold rect{fill:#fff;stroke:#777}.fold text{font-size:10px;fill:#333}
.node.match .shape{stroke:#e8a400;stroke-width:4}
.score-dot{cursor:pointer}
"""

# Hand-written, dependency-free: builds SVG and the panel with createElementNS / textContent only.
_SCRIPT = r"""
(function(){
"use strict";
var data=JSON.parse(document.getElementById("run-data").textContent);
var SVG="http://www.w3.org/2000/svg";
function el(tag,attrs,text){var e=document.createElementNS(SVG,tag);for(var k in attrs){e.setAttribute(k,attrs[k]);}if(text!==undefined){e.textContent=text;}return e;}
function html(tag,text,cls){var e=document.createElement(tag);if(text!==undefined&&text!==null){e.textContent=String(text);}if(cls){e.className=cls;}return e;}
function scoreColour(s){if(s===null||s===undefined){return "#d9d9d9";}var t=Math.max(0,Math.min(1,s));
  var r=Math.round(215-(215-40)*t),g=Math.round(48+(167-48)*t),b=Math.round(39+(69-39)*t);return "rgb("+r+","+g+","+b+")";}
var SHAPES={input:"rect",solution:"star",synthesis:"hexagon",decomposition:"trapezoid",
  critique:"triangle",evidence:"square",question:"diamond",plan:"square",code:"square"};
function shapeOf(n){return SHAPES[n.base_kind]||"circle";}
function drawShape(n){var x=n.x,y=n.y,r=11,kind=shapeOf(n),a={"class":"shape "+n.status+(n.best?" best":"")+(n.goal?" goal":""),
  fill:scoreColour(n.score),stroke:"#444","stroke-width":1.2,"data-shape":kind};var s;
  if(kind==="rect"){a.x=x-16;a.y=y-10;a.width=32;a.height=20;a.rx=3;s=el("rect",a);}
  else if(kind==="square"){a.x=x-r;a.y=y-r;a.width=2*r;a.height=2*r;s=el("rect",a);}
  else if(kind==="circle"){a.cx=x;a.cy=y;a.r=r;s=el("circle",a);}
  else{var p;if(kind==="diamond"){p=[[x,y-13],[x+13,y],[x,y+13],[x-13,y]];}
    else if(kind==="triangle"){p=[[x,y-13],[x+12,y+10],[x-12,y+10]];}
    else if(kind==="hexagon"){p=[[x-12,y],[x-6,y-11],[x+6,y-11],[x+12,y],[x+6,y+11],[x-6,y+11]];}
    else if(kind==="trapezoid"){p=[[x-8,y-10],[x+8,y-10],[x+14,y+10],[x-14,y+10]];}
    else{p=[];for(var i=0;i<10;i++){var rr=i%2?6:14,ang=Math.PI/5*i-Math.PI/2;p.push([x+rr*Math.cos(ang),y+rr*Math.sin(ang)]);}}
    a.points=p.map(function(q){return q[0].toFixed(1)+","+q[1].toFixed(1);}).join(" ");s=el("polygon",a);}
  return s;}
function summary(){var r=data.run;document.getElementById("title").textContent="thoughtloom run "+r.id;
  var dl=document.getElementById("summary");
  [["status",r.status],["task",r.task],["model",r.model],["problem",r.problem],["answer",r.answer===null?"(none)":r.answer],
   ["stopped",r.stopped],["solved",r.solved],["nodes",data.nodes.length]].forEach(function(kv){
   if(kv[1]===undefined||kv[1]===null){return;}dl.appendChild(html("dt",kv[0]));dl.appendChild(html("dd",kv[1]));});}
function legend(){var box=document.getElementById("legend");
  [["score 0",scoreColour(0)],["score 0.5",scoreColour(0.5)],["score 1",scoreColour(1)],["no score",scoreColour(null)]].forEach(function(p){
   var s=html("span");var i=html("i");i.style.background=p[1];s.appendChild(i);s.appendChild(document.createTextNode(p[0]));box.appendChild(s);});
  box.appendChild(html("span","shape = kind (○ thought, ▭ input, ★ solution, ◇ question, ⬡ synthesis, △ critique, □ evidence / plan / code, trapezoid decomposition); green border = best path; dashed = pruned; red border = failed; +N = nodes in folded pruned / failed branches (click to show)"));}
var byId={};data.nodes.forEach(function(n){byId[n.id]=n;});
function section(box,title,value){box.appendChild(html("h3",title));
  box.appendChild(html("pre",typeof value==="string"?value:JSON.stringify(value,null,2)));}
function show(n){var box=document.getElementById("details");box.textContent="";
  document.getElementById("panel-hint").textContent="Node #"+n.id;
  var head=html("p");head.id="node-head";head.textContent=n.kind+" · "+n.status+" · depth "+n.depth+
    (n.score===null?"":" · score "+n.score.toFixed(3))+(n.best?" · best path":"")+(n.goal?" · goal":"")+" · "+n.tokens+" tokens";
  box.appendChild(head);section(box,"thought",n.content);
  if(n.parents.length){section(box,"parents",n.parents.map(function(p){return "#"+p;}).join(", "));}
  var s=n.sections;
  if(s.rejected!==undefined){section(box,"why pruned",s.rejected);}
  if(s.error!==undefined){section(box,"error",s.error);}
  if(s.text!==undefined){section(box,"result",s.text);}
  if(s.grounding!==undefined){section(box,"grounding evidence",s.grounding);}
  if(s.evidence!==undefined){section(box,"evidence",s.evidence);}
  if(s.recursion!==undefined){if(s.recursion.contract){section(box,"contract",s.recursion.contract);}
    section(box,"recursion",s.recursion);}
  if(s.tool_calls!==undefined){section(box,"tool calls",s.tool_calls);}
  if(s.hypothesis!==undefined){section(box,"hypothesis",s.hypothesis);}
  if(Object.keys(n.other).length){section(box,"other metadata",n.other);}
  selected=n.id;var old=document.querySelector(".node.selected");if(old){old.classList.remove("selected");}
  var g=document.getElementById("node-"+n.id);if(g){g.classList.add("selected");}}
// Big runs: pruned, failed and cancelled branches fold into a "+N" badge on their parent (every
// branch shows below FOLD_ABOVE nodes); the rows are packed again from the nodes shown, in the
// order the data gives (row_order), so folding never reorders what stays.
var children={},roots=[],selected=null,scale=1,showAll=!data.fold,expanded={},size={};
data.nodes.forEach(function(n){if(n.parent===null||!byId[n.parent]){roots.push(n);}else{(children[n.parent]=children[n.parent]||[]).push(n);}});
function foldable(n){return (n.status==="pruned"||n.status==="failed"||n.status==="cancelled")&&!n.best&&!n.goal;}
function subtree(n){if(size[n.id]===undefined){var t=1,stack=[n],seen={};seen[n.id]=1;
  while(stack.length){var m=stack.pop();(children[m.id]||[]).forEach(function(c){if(!seen[c.id]){seen[c.id]=1;t++;stack.push(c);}});}
  size[n.id]=t;}return size[n.id];}
function visibleSet(){var vis={},folded={},stack=roots.slice();roots.forEach(function(r){vis[r.id]=true;});
  while(stack.length){var n=stack.pop();(children[n.id]||[]).forEach(function(c){if(vis[c.id]){return;}
    if(showAll||expanded[n.id]||!foldable(c)){vis[c.id]=true;stack.push(c);}else{folded[n.id]=(folded[n.id]||0)+subtree(c);}});}
  return {vis:vis,folded:folded};}
function reveal(n){var m=n;while(m.parent!==null&&byId[m.parent]){expanded[m.parent]=true;m=byId[m.parent];}}
function graph(){var svg=document.getElementById("graph");svg.textContent="";
  var v=visibleSet(),rows={},G=data.grid,width=1,depthMax=0;
  data.nodes.forEach(function(n){if(v.vis[n.id]){(rows[n.depth]=rows[n.depth]||[]).push(n);}});
  Object.keys(rows).forEach(function(d){rows[d].sort(function(a,b){return a.col-b.col;});width=Math.max(width,rows[d].length);depthMax=Math.max(depthMax,+d);});
  Object.keys(rows).forEach(function(d){var r=rows[d];r.forEach(function(n,i){n.x=Math.round((i+(width-r.length)/2)*G.column)+G.column;n.y=n.depth*G.row+40;});});
  var W=width*G.column+2*G.column,H=depthMax*G.row+100;svg.setAttribute("viewBox","0 0 "+W+" "+H);
  svg.setAttribute("data-width",W);svg.setAttribute("data-height",H);zoom(scale);
  var edges=el("g",{id:"edges"});svg.appendChild(edges);
  data.edges.forEach(function(e){var a=byId[e.src],b=byId[e.dst];if(!a||!b||!v.vis[a.id]||!v.vis[b.id]){return;}
    var my=(a.y+b.y)/2;edges.appendChild(el("path",{"class":"edge "+e.kind+(e.best?" best":""),
      d:"M"+a.x+","+a.y+" C"+a.x+","+my+" "+b.x+","+my+" "+b.x+","+b.y}));});
  var layer=el("g",{id:"nodes"});svg.appendChild(layer);var shown=0;
  data.nodes.forEach(function(n){if(!v.vis[n.id]){return;}shown++;
    var g=el("g",{"class":"node"+(n.id===selected?" selected":""),"id":"node-"+n.id,"data-id":n.id,tabindex:0});
    g.appendChild(el("title",{},"#"+n.id+" "+n.kind+" ("+n.status+(n.score===null?"":", score "+n.score.toFixed(3))+"): "+n.content));g.appendChild(drawShape(n));
    if(n.status==="failed"){g.appendChild(el("text",{"class":"mark",x:n.x+10,y:n.y-10,fill:"#c82333"},"✗"));}
    if(n.sections.grounding&&n.sections.grounding.verified!==undefined&&n.sections.grounding.verified!==null){
      g.appendChild(el("text",{"class":"mark",x:n.x-18,y:n.y-10,fill:n.sections.grounding.verified?"#0b7d3e":"#c82333"},n.sections.grounding.verified?"✓":"✗"));}
    g.addEventListener("click",function(){show(n);});
    g.addEventListener("keydown",function(ev){if(ev.key==="Enter"){show(n);}});layer.appendChild(g);
    var hidden=v.folded[n.id],open=!showAll&&expanded[n.id]&&(children[n.id]||[]).some(foldable);
    if(hidden||open){var f=el("g",{"class":"fold","id":"fold-"+n.id,"data-id":n.id,tabindex:0});
      var label=hidden?"+"+hidden:"−";f.appendChild(el("title",{},hidden?hidden+" nodes in folded pruned/failed branches: click to show":"click to fold the pruned/failed branches again"));
      f.appendChild(el("rect",{x:n.x+13,y:n.y+4,width:8+6*label.length,height:14,rx:7}));
      f.appendChild(el("text",{x:n.x+17,y:n.y+15},label));
      var toggle=function(){expanded[n.id]=!!hidden;graph();filter();};
      f.addEventListener("click",toggle);f.addEventListener("keydown",function(ev){if(ev.key==="Enter"){toggle();}});layer.appendChild(f);}});
  document.getElementById("shown").textContent="showing "+shown+" of "+data.nodes.length+" nodes"+
    (data.nodes.length>shown?" ("+(data.nodes.length-shown)+" in folded branches: click a +N badge)":"");}
function zoom(s){scale=Math.max(0.05,Math.min(4,s));var svg=document.getElementById("graph");
  svg.setAttribute("width",Math.round(svg.getAttribute("data-width")*scale));svg.setAttribute("height",Math.round(svg.getAttribute("data-height")*scale));}
function fit(){var box=document.getElementById("graph-scroll"),svg=document.getElementById("graph");
  zoom(Math.min(1,(box.clientWidth-4)/svg.getAttribute("data-width")));}
var matches=[],current=-1;
function matching(q){q=q.trim().toLowerCase();if(!q){return [];}
  return data.nodes.filter(function(n){return ("#"+n.id)===q||n.kind.toLowerCase()===q||n.status===q||String(n.content).toLowerCase().indexOf(q)>=0;});}
function filter(){var q=document.getElementById("filter").value,v=visibleSet().vis;matches=matching(q);
  Array.prototype.forEach.call(document.querySelectorAll(".node.match"),function(g){g.classList.remove("match");});
  var hidden=0;matches.forEach(function(n){var g=document.getElementById("node-"+n.id);if(g){g.classList.add("match");}if(!v[n.id]){hidden++;}});
  document.getElementById("matches").textContent=q.trim()?matches.length+" match"+(matches.length===1?"":"es")+
    (hidden?" ("+hidden+" folded)":"")+(matches.length?": Enter goes to the next":""):"";}
function goTo(n){if(!visibleSet().vis[n.id]){reveal(n);graph();filter();}show(n);
  var g=document.getElementById("node-"+n.id);if(g&&g.scrollIntoView){g.scrollIntoView({block:"center",inline:"center"});}}
function controls(){var box=document.getElementById("filter");box.addEventListener("input",function(){current=-1;filter();});
  box.addEventListener("keydown",function(ev){if(ev.key==="Enter"&&matches.length){current=(current+1)%matches.length;goTo(matches[current]);}});
  document.getElementById("zoom-in").addEventListener("click",function(){zoom(scale*1.25);});
  document.getElementById("zoom-out").addEventListener("click",function(){zoom(scale/1.25);});
  document.getElementById("zoom-reset").addEventListener("click",function(){zoom(1);});
  document.getElementById("zoom-fit").addEventListener("click",fit);
  document.getElementById("graph-scroll").addEventListener("wheel",function(ev){if(!ev.ctrlKey){return;}ev.preventDefault();zoom(scale*(ev.deltaY<0?1.1:1/1.1));},{passive:false});
  document.getElementById("expand-all").addEventListener("click",function(){showAll=true;graph();filter();});
  document.getElementById("collapse-all").addEventListener("click",function(){showAll=false;expanded={};graph();filter();});}
function timeline(){var svg=document.getElementById("timeline"),W=960,H=220,L=60,R=110,T=24,B=30;
  var tk=data.tokens,sc=data.scores;svg.appendChild(el("line",{x1:L,y1:H-B,x2:W-R,y2:H-B,stroke:"#555"}));
  svg.appendChild(el("text",{x:L,y:14,"font-size":11,fill:"#2457a6"},"tokens spent by call (blue)"));
  svg.appendChild(el("text",{x:W-R-420,y:14,"font-size":11,fill:"#1e7e34"},"score per node (dots, grey = pruned; click one), best so far (line), by node created"));
  var limit=data.limits.tokens;
  if(tk.length){var max=Math.max(tk[tk.length-1].tokens,limit||0)||1,pts=tk.map(function(p,i){var x=L+(W-L-R)*(tk.length>1?i/(tk.length-1):0);
      return [x,H-B-(H-T-B)*p.tokens/max,p];});
    svg.appendChild(el("polyline",{id:"token-line",points:pts.map(function(q){return q[0].toFixed(1)+","+q[1].toFixed(1);}).join(" "),fill:"none",stroke:"#2457a6","stroke-width":2}));
    pts.forEach(function(q){var c=el("circle",{cx:q[0],cy:q[1],r:q[2].error?4:2,fill:q[2].error?"#c82333":"#2457a6"});
      c.appendChild(el("title",{},q[2].purpose+": "+q[2].tokens+" tokens"+(q[2].error?" — "+q[2].error:"")));svg.appendChild(c);});
    svg.appendChild(el("text",{x:4,y:T+8,"font-size":11},String(max)));
    if(limit){var ly=H-B-(H-T-B)*limit/max;svg.appendChild(el("line",{id:"budget-line",x1:L,y1:ly,x2:W-R,y2:ly,stroke:"#c82333","stroke-dasharray":"6 4"}));
      svg.appendChild(el("text",{x:L+4,y:ly+13,"font-size":11,fill:"#c82333"},"token budget at start: "+limit));}}
  if(sc.length){var n=sc.length,sp=sc.map(function(p,i){var x=L+(W-L-R)*(n>1?i/(n-1):0);return [x,H-B-(H-T-B)*Math.max(0,Math.min(1,p.best))];});
    var dots=el("g",{id:"score-dots"});svg.appendChild(dots);
    sc.forEach(function(p,i){var x=sp[i][0],y=H-B-(H-T-B)*Math.max(0,Math.min(1,p.score)),node=byId[p.node];
      var c=el("circle",{"class":"score-dot "+p.status,cx:x.toFixed(1),cy:y.toFixed(1),r:2.5,"data-node":p.node,
        fill:p.status==="pruned"||p.status==="cancelled"?"#9a9a9a":scoreColour(p.score),stroke:node&&node.best?"#1e7e34":"none"});
      c.appendChild(el("title",{},"#"+p.node+" "+p.status+": score "+p.score.toFixed(3)+" (best so far "+p.best.toFixed(3)+")"));
      if(node){c.addEventListener("click",function(){goTo(node);});}dots.appendChild(c);});
    svg.appendChild(el("polyline",{id:"score-line",points:sp.map(function(q){return q[0].toFixed(1)+","+q[1].toFixed(1);}).join(" "),fill:"none",stroke:"#1e7e34","stroke-width":2}));
    svg.appendChild(el("text",{x:W-R+4,y:H-B,"font-size":11},"0.0"));
    svg.appendChild(el("text",{x:W-R+4,y:T+8,"font-size":11},"1.0"));
    var th=(data.control&&data.control.thresholds)||{};["acceptable","goal"].forEach(function(k){if(typeof th[k]!=="number"){return;}
      var ty=H-B-(H-T-B)*Math.max(0,Math.min(1,th[k]));svg.appendChild(el("line",{"class":"threshold",x1:L,y1:ty,x2:W-R,y2:ty,stroke:"#1e7e34","stroke-dasharray":"2 4"}));
      svg.appendChild(el("text",{x:W-R+4,y:ty+4,"font-size":10,fill:"#1e7e34"},k+" "+th[k]));});}
  var list=document.getElementById("decisions");
  if(!data.decisions.length){list.appendChild(html("li","no controller ran, or it decided nothing"));}
  data.decisions.forEach(function(d){list.appendChild(html("li","["+d.kind+"] "+d.decision+": "+d.reason+
    (d.tokens_spent!==undefined?" (at "+d.tokens_spent+" tokens)":"")));});
  if(Object.keys(data.control).length){document.getElementById("control").textContent=JSON.stringify(data.control,null,2);}}
summary();legend();controls();graph();timeline();
if(roots.length){var pane=document.getElementById("graph-scroll");pane.scrollLeft=Math.max(0,roots[0].x*scale-pane.clientWidth/2);}
document.body.setAttribute("data-ready","1");
})();
"""
