// cuda.fa3's and cuda.fa4's kernels (fa3_kernels.cu): FlashAttention-3's forward on Hopper's warpgroup MMA and TMA
// (kernels/cuda/NOTES.md "cuda.fa3, cuda.fa4"), in the schedules of the plan's steps 1-3; bf16 and fp16, head dim 64
// and 128 (the warp-specialised kernel itself is fa3_forward.cuh's, shared with cuda.fa3.fp8). Each entry point
// checks its launch and throws std::runtime_error naming the kernel and the CUDA error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_params.hpp"

namespace fc::kernels::cuda {

// When the forward's steps happen (the arithmetic, and so the result, is the same in each):
//   one_group: one warpgroup per 64 rows, every product waited for (step 1);
//   ws: a producer warp and two consumer warpgroups sharing a 2-stage K/V ring (step 2);
//   ws_overlap: ws, with the next tile's S = Q K^T issued with this tile's O += P V and the next softmax
//     run while they compute (step 3);
//   ws_overlap_pingpong: ws_overlap, the two groups taking turns to issue their products;
//   ws_overlap_pingpong_3stage: the same with a 3-stage ring;
//   ws_overlap_pingpong_3groups: ws_overlap_pingpong with three consumer warpgroups (192 rows per CTA) taking turns
//     in a ring, 160 registers each: d = 64 only (at d = 128, O, S and P do not fit them);
//   ws_overlap_pingpong_3groups_p_shared: the same at d = 128 with P V reading P from a shared-memory tile of each
//     group's, so that O and S alone take the registers: d = 128 only (kernels/cuda/NOTES.md, "P from shared memory");
//   ws_overlap_3groups, ws_overlap_3groups_p_shared: the two above without turns: each group issues its products as
//     soon as its P is ready (with P in shared memory, after a barrier of its own 128 threads), d = 64 and 128 only;
//   automatic: ws_overlap_pingpong_3groups at d = 64, ws_overlap_pingpong at d = 128 (and with 176-key tiles).
enum class Fa3Schedule : std::uint8_t {
  one_group,
  ws,
  ws_overlap,
  ws_overlap_pingpong,
  ws_overlap_pingpong_3stage,
  ws_overlap_pingpong_3groups,
  ws_overlap_pingpong_3groups_p_shared,
  ws_overlap_3groups,
  ws_overlap_3groups_p_shared,
  automatic
};
const char* fa3_schedule_name(Fa3Schedule schedule);

bool fa3_supports(const ForwardParams& p);  // head dim 64 or 128, strides TMA can describe

// O and L (natural log) of every (batch, head), as fa2_forward writes them. key_tile: keys per K/V tile, 128, or 176
// (FA3's tile for 16-bit d = 128 without a mask; schedules ws_overlap_pingpong and automatic, which then runs it). The
// tile sets the points where the running max may move, and so where P is rounded: cpu.fa3 with block_k = key_tile is
// its twin.
// How the warp-specialised kernels store O: automatic (through shared memory and one TMA store per box, FA3's
// epilogue, where O is rounded to nearest and TMA can write it; store_rows' 4-byte global stores otherwise) or stores
// (always store_rows). The same bits either way; the choice is there to measure it (kernels/cuda/NOTES.md, "O by TMA").
// cuda.fa4's persistent scheduler stages O in the work tile's Q buffer; cuda.fa3.fp8 takes the same option
// (fa3_fp8_o_by_tma).
enum class Fa3Epilogue : std::uint8_t { automatic, stores };
// Which CTA computes a query tile: grid (one CTA per 128-row tile) or persistent (one CTA per SM walking the tiles
// longest first, cuda.fa4's scheduler: fa3_forward.cuh, WorkTiles), with schedule automatic or ws_overlap_pingpong,
// 128-key tiles and two consumer groups (at d = 64 too, where the grid's automatic runs three). The persistent one
// takes its tiles from *p.work_counter, which must be 0 at the launch. The same bits either way.
enum class Fa3Scheduler : std::uint8_t { grid, persistent };
void fa3_forward(const ForwardParams& p, Fa3Schedule schedule, cudaStream_t stream, int key_tile = 128, Fa3Epilogue epilogue = Fa3Epilogue::automatic,
                 Fa3Scheduler scheduler = Fa3Scheduler::grid);
// The scheduler `auto` takes (cuda.fa3's and cuda.fa4's option, the PyTorch op's cuda.fa3): the persistent one where
// it measured faster (H200; kernels/cuda/NOTES.md "The persistent forward with O by TMA" and "The persistent
// scheduler's sections"): under causal masks at d = 128, where its longest-first order shortens the tail (cuda.fa4
// + 2.7 % over the grid at N = 4k, + 3.4 % at 8k, level at 16k, kernel alone; cuda.fa3 in the bench, three processes
// against two: + 4 % at 4k, + 3 % at 8k, - 1 % at 16k). Without a mask the grid is level or ahead (the persistent
// step is 2.5 % longer in clocks), and at d = 64 the grid runs three consumer groups where the persistent kernel keeps
// two.
inline bool persistent_scheduler_by_default(const AttentionShapeParams& s) { return s.mask != CausalMask::none && s.head_dim == 128; }

// dQ, dK, dV from the forward's O and L (fa3_backward.cu): D by fa2's kernel, then a key-tiled pass for dK and dV
// that also adds dQ's partials into p.dq_accum by atomics (p.deterministic false: fused), or a key-tiled dK/dV pass
// and a query-tiled dQ pass (p.deterministic: two passes, no atomics); p.delta is the D workspace.
void fa3_backward(const BackwardParams& p, cudaStream_t stream);
// What each of p.dq_ready's counts reaches when the fused backward's key-tiled pass is done: one per consumer
// warpgroup per key tile of 128 (every key tile counts in, those with no query to visit too). The overlapped conversion
// waits for it.
unsigned fa3_dq_ready_count(const AttentionShapeParams& s);
// Whether the key-tiled pass stores dK and dV through shared memory and TMA (else by 4-byte global stores): unless
// p.dk_dv_by_stores asks for the stores, or dK's or dV's layout is not TMA's (a 16-byte aligned base, strides that are
// multiples of 8 elements). The same bits either way.
bool fa3_dk_dv_by_tma(const BackwardParams& p);

// cuda.fa4's key tile at head dim 256 (64 and 128 take 128): O's 128 fp32 registers a consumer thread leave room for
// S and P of 64 keys, and two stages of 64-key K and V tiles (32 KiB each) fit beside Q's 64 KiB. cpu.fa4's twin tiles
// its keys the same way there (its block_k_large_d).
constexpr int kFa4KeyTileD256 = 64;

// cuda.fa4's forward at head dims 64, 128 and 256: ws_overlap_pingpong (three groups at d = 64 with the grid scheduler;
// two groups and kFa4KeyTileD256-key tiles at 256, the grid scheduler only: persistent is refused there) with FA4's
// softmax (fa3_forward.cuh, SoftmaxRule): the running max
// raised only when a tile's max exceeds it by p.rescale_threshold or more (log2 units; the count added to
// *p.rescale_count when set), and emulated_eighths / 8 of the exponentials (0, 1 or 4) by the cubic exp2
// emulation on the FMA pipes; persistent: one CTA per SM walking the work tiles longest first (WorkTiles)
// instead of one CTA per tile.
struct Fa4Options {
  int emulated_eighths = 0;
  bool persistent = false;
  Fa3Epilogue epilogue = Fa3Epilogue::automatic;
};
void fa4_forward(const ForwardParams& p, const Fa4Options& options, cudaStream_t stream);

}  // namespace fc::kernels::cuda
