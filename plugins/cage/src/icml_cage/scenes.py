"""Procedural scene families: each draws a chain SCM as a PIL image whose pixels show every
node state (fallen dominoes, current-carrying wires in orange, a lit lamp, a ringing bell) and
every exogenous value (gaps, cut wires, closed gates) except one, which a hatched grey cover
hides: what happened shows whether the covered part works (abduction).

A family is a :class:`Family`; register new ones in ``FAMILIES`` (or pass your own to
:func:`icml_cage.generate_benchmark`). The benchmark chooses the exogenous values and the
covered enabler (to balance the answers) and then calls ``draw``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from icml_cage.scm import ChainSCM, Node


@dataclass(frozen=True)
class Family:
    """A scene family: the chain's nodes (``build``), which enablers a cover may hide
    (``coverable``), the node's wording when its enabler is covered (``cover_node``), and the
    picture (``draw``; every node state is drawn, a covered enabler is not)."""

    name: str
    build: Callable[[random.Random], list[Node]]
    draw: Callable[[ChainSCM, int], Any]
    coverable: Callable[[list[Node]], list[int]] = lambda nodes: list(range(1, len(nodes) - 1))
    cover_node: Callable[[Node, int], Node] = lambda node, i: node


SceneFn = Family  # kept name: what generate_benchmark accepts as a family

BG, INK = (245, 245, 240), (40, 40, 40)
ON, OFF = (230, 160, 20), (150, 150, 150)
COVER, HATCH = (110, 110, 125), (170, 170, 185)


def draw_cover(d: Any, box: tuple[float, float, float, float], s: float) -> None:
    """A hatched grey cover: what is under it is not shown."""
    x0, y0, x1, y1 = box
    d.rectangle([x0, y0, x1, y1], fill=COVER, outline=INK)
    k = x0 + 3 * s
    while k < x1 - 1:  # vertical hatching
        d.line([(k, y0 + 1), (k, y1 - 1)], fill=HATCH, width=1)
        k += 3 * s


DOMINO_H, DOMINO_W, NARROW, WIDE, COVERED, FALL_DEG = 14, 5, 10, 22, 16, 60


def domino_layout(exogenous: tuple[bool, ...], states: list[bool], size: int = 128,
                  hidden: int | None = None) -> tuple[list[float], list[list[tuple[float, float]]]]:
    """Left edges and polygons of the dominoes. A fallen domino pivots on its right foot and
    its tip reaches past the next domino's left edge after a narrow step, and stops short of
    it after a wide one (a wide gap breaks the chain in the picture too); a covered step has
    one width whatever is under the cover. Everything fits in ``size`` pixels for up to 6
    dominoes."""
    s = size / 128
    ground, h, w = 96 * s, DOMINO_H * s, DOMINO_W * s
    xs, polys, x = [], [], 8 * s
    for i, fallen in enumerate(states):
        if i > 0:
            x += (COVERED if i == hidden else NARROW if exogenous[i] else WIDE) * s
        a = math.radians(FALL_DEG if fallen else 0)
        px = x + w  # the right foot: a domino falls to the right, onto the next one
        corners = [(-w, 0.0), (0.0, 0.0), (0.0, -h), (-w, -h)]
        polys.append([(px + cx * math.cos(a) - cy * math.sin(a),
                       ground + cx * math.sin(a) + cy * math.cos(a)) for cx, cy in corners])
        xs.append(x)
    return xs, polys


def _domino_nodes(rng: random.Random) -> list[Node]:
    n = rng.randint(3, 6)
    return [Node("domino 1", "falls", "stays upright", "", "")] + [
        Node(f"domino {i}", "falls", "stays upright", f"domino {i} stands close to domino {i - 1}",
             f"there is a wide gap before domino {i}") for i in range(2, n + 1)]


def _domino_cover(node: Node, i: int) -> Node:
    return Node(node.name, node.on, node.off,
                f"nothing under the cover stops domino {i} from knocking over domino {i + 1}",
                f"a peg under the cover stops domino {i} from knocking over domino {i + 1}")


def draw_domino(scm: ChainSCM, size: int = 128) -> Any:
    """A row of 3-6 dominoes; a wide gap before a domino breaks the chain there."""
    from PIL import Image, ImageDraw

    states = scm.factual()
    img = Image.new("RGB", (size, size), BG)
    d = ImageDraw.Draw(img)
    s = size / 128
    ground = 96 * s
    d.line([(4 * s, ground), (124 * s, ground)], fill=INK, width=max(1, int(2 * s)))
    xs, polys = domino_layout(scm.exogenous, states, size, scm.hidden)
    for i, pts in enumerate(polys):
        d.polygon(pts, fill=ON if states[i] else OFF, outline=INK)
    if scm.exogenous[0]:  # the push: an arrow into domino 1
        x, y = xs[0], ground - 0.7 * DOMINO_H * s
        d.line([(x - 7 * s, y), (x - 1 * s, y)], fill=INK, width=max(1, int(2 * s)))
    if scm.hidden is not None:
        h = scm.hidden
        draw_cover(d, (xs[h - 1] + DOMINO_W * s + 1, ground - 9 * s, xs[h] - 1, ground), s)
    return img


def _lamp_nodes(rng: random.Random) -> list[Node]:
    nodes = [Node("switch", "is on", "is off")]
    if rng.random() < 0.5:
        nodes.append(Node("fuse", "passes current", "passes no current", "the fuse is intact",
                          "the fuse is blown"))
    return nodes + [Node("wire", "carries current", "carries no current", "the wire is intact",
                         "the wire is cut"),
                    Node("lamp", "is lit", "is dark", "the bulb is screwed in",
                         "the bulb is missing")]


def draw_lamp(scm: ChainSCM, size: int = 128) -> Any:
    """Switch -> (fuse) -> wire -> lamp: a blown fuse or a cut wire breaks the circuit;
    current-carrying parts are orange."""
    from PIL import Image, ImageDraw

    nodes, states = scm.nodes, scm.factual()
    img = Image.new("RGB", (size, size), BG)
    d = ImageDraw.Draw(img)
    s = size / 128
    w = max(1, int(2 * s))
    # switch: a lever up (on) or down (off)
    d.rectangle([8 * s, 56 * s, 24 * s, 72 * s], outline=INK, width=w)
    tip = (16 * s, 44 * s) if states[0] else (16 * s, 84 * s)
    d.line([(16 * s, 64 * s), tip], fill=ON if states[0] else OFF, width=3 * w)
    x = 24 * s
    cover = None
    for i, node in enumerate(nodes[1:], start=1):
        colour = ON if states[i] else OFF
        shown = scm.hidden != i
        if node.name == "fuse":
            d.line([(x, 64 * s), (x + 10 * s, 64 * s)], fill=colour, width=w)
            d.rectangle([x + 10 * s, 58 * s, x + 26 * s, 70 * s], outline=INK, width=w)
            if scm.exogenous[i]:
                d.line([(x + 10 * s, 64 * s), (x + 26 * s, 64 * s)], fill=colour, width=w)
            else:
                d.line([(x + 12 * s, 60 * s), (x + 24 * s, 68 * s)], fill=(200, 0, 0), width=w)
            if not shown:
                cover = (x + 9 * s, 55 * s, x + 27 * s, 73 * s)
            x += 26 * s
        elif node.name == "wire":
            end = 96 * s
            mid = (x + end) / 2
            if scm.exogenous[i] or not shown:  # a covered wire is drawn whole; the cover hides
                d.line([(x, 64 * s), (end, 64 * s)], fill=colour, width=2 * w)
            else:
                d.line([(x, 64 * s), (mid - 5 * s, 64 * s)], fill=colour, width=2 * w)
                d.line([(mid + 5 * s, 70 * s), (end, 64 * s)], fill=OFF, width=2 * w)
            if not shown:
                cover = (mid - 8 * s, 56 * s, mid + 8 * s, 74 * s)
            x = end
        else:  # lamp
            if scm.exogenous[i]:
                d.ellipse([x, 52 * s, x + 24 * s, 76 * s],
                          fill=(255, 230, 60) if states[i] else (90, 90, 90), outline=INK)
                if states[i]:
                    for k in range(8):
                        a = k * math.pi / 4
                        cx, cy = x + 12 * s, 64 * s
                        d.line([(cx + 14 * s * math.cos(a), cy + 14 * s * math.sin(a)),
                                (cx + 19 * s * math.cos(a), cy + 19 * s * math.sin(a))],
                               fill=(255, 200, 0), width=w)
            else:
                d.rectangle([x + 6 * s, 70 * s, x + 18 * s, 78 * s], outline=INK, width=w)
    if cover:
        draw_cover(d, cover, s)
    return img


def _ramp_nodes(rng: random.Random) -> list[Node]:
    nodes = [Node("ball", "is released", "is held at the top"),
             Node("ramp", "carries the rolling ball", "carries no ball", "the ramp is clear",
                  "a block sits on the ramp")]
    if rng.random() < 0.5:
        nodes.append(Node("gate", "lets the ball through", "lets no ball through",
                          "the gate is open", "the gate is closed"))
    return nodes + [Node("bell", "rings", "is silent", "the bell has its clapper",
                         "the bell has no clapper")]


def draw_ramp(scm: ChainSCM, size: int = 128) -> Any:
    """Ball -> ramp -> (gate) -> bell: a block on the ramp or a closed gate stops the ball;
    the stretch a rolling ball passes is orange."""
    from PIL import Image, ImageDraw

    nodes, states = scm.nodes, scm.factual()
    img = Image.new("RGB", (size, size), BG)
    d = ImageDraw.Draw(img)
    s = size / 128
    w = max(1, int(2 * s))
    d.line([(8 * s, 30 * s), (62 * s, 70.5 * s)], fill=INK, width=2 * w)  # the ramp
    d.line([(62 * s, 70.5 * s), (88 * s, 90 * s)], fill=ON if states[1] else INK, width=2 * w)
    ball_at = (14 * s, 18 * s) if not states[0] else (30 * s, 30 * s)
    d.ellipse([ball_at[0], ball_at[1], ball_at[0] + 10 * s, ball_at[1] + 10 * s],
              fill=ON if states[0] else OFF, outline=INK)
    if not scm.exogenous[1]:
        d.rectangle([46 * s, 48 * s, 56 * s, 58 * s], fill=(160, 60, 40), outline=INK)
    cover = (42 * s, 42 * s, 60 * s, 62 * s) if scm.hidden == 1 else None
    if nodes[2].name == "gate":
        gi = 2
        colour = ON if states[gi] else OFF
        if scm.exogenous[gi]:
            d.line([(70 * s, 60 * s), (70 * s, 72 * s)], fill=colour, width=w)
        else:
            d.line([(70 * s, 60 * s), (70 * s, 84 * s)], fill=(200, 0, 0), width=2 * w)
        d.line([(76 * s, 96 * s), (90 * s, 96 * s)], fill=colour, width=w)  # past the gate
        if scm.hidden == gi:
            cover = (64 * s, 56 * s, 76 * s, 88 * s)
    bi = len(nodes) - 1
    d.arc([94 * s, 76 * s, 118 * s, 100 * s], 180, 360, fill=INK, width=w)
    d.line([(94 * s, 88 * s), (118 * s, 88 * s)], fill=INK, width=w)
    if scm.exogenous[bi]:
        d.ellipse([104 * s, 88 * s, 108 * s, 94 * s], fill=INK)
    if states[bi]:
        for k in (-1, 1):
            d.arc([88 * s + 4 * k * s, 70 * s, 124 * s + 4 * k * s, 106 * s], 200, 340,
                  fill=ON, width=w)
    if cover:
        draw_cover(d, cover, s)
    return img


def _middle(nodes: list[Node]) -> list[int]:
    return list(range(1, len(nodes) - 1))  # enablers before the last node: the effect's own
    # enabler (bulb, clapper) stays visible


FAMILIES: dict[str, Family] = {
    "domino": Family("domino", _domino_nodes, draw_domino, _middle, _domino_cover),
    "lamp": Family("lamp", _lamp_nodes, draw_lamp, _middle),
    "ramp": Family("ramp", _ramp_nodes, draw_ramp, _middle),
}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown scene family {name!r}: choose from "
                         f"{', '.join(FAMILIES)} or register one in icml_cage.scenes.FAMILIES"
                         ) from None
