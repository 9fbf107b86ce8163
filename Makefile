# Every target installs what it needs into .venv first, so each works on a fresh clone. `make help` lists them.
PY := .venv/bin/python
VENV_STAMP := .venv/.installed

.PHONY: help install run test test-fast test-shape lint bench bench-gpu clean

help:  ## this list
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)/  make \1\t\2/' | expand -t 24

$(VENV_STAMP): pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -e '.[dev]'
	touch $(VENV_STAMP)

install: $(VENV_STAMP)  ## .venv with cl-bench and every extra (wandb, sweep, plots, dev)

run: $(VENV_STAMP)  ## the embedded default: finetune on split_digits with a small convnet
	.venv/bin/cl-bench train $(ARGS)

test: $(VENV_STAMP)  ## the suite, on two workers (one torch thread each); CL_BENCH_DATA=DIR adds the real-data tests
	$(PY) -m pytest -q -n 2 --dist worksteal  # an idle worker takes queued tests from the busy one: 614 -> 594 s here

test-fast: $(VENV_STAMP)  ## the contract and unit tests, no whole run (a test that starts one is marked slow): minutes
	$(PY) -m pytest -q -n 2 -m "not shape and not slow"

test-shape: $(VENV_STAMP)  ## every paper setting at its real shape under debug=shape (VGG16-BN and ResNet-18: hours on a CPU)
	$(PY) -m pytest -q -m shape tests/test_shape.py $(ARGS)

lint: $(VENV_STAMP)  ## ruff over the package, tests and scripts
	.venv/bin/ruff check cl_bench tests scripts

# The benchmarks read real data from a data root you give: DATA=DIR holding MNIST/raw; bench-gpu reads
# CIFAR10=the CIFAR-10 files you have, which `cl-bench data prepare cifar10` turns into cifar-10-batches-py/.
need-data:
	@test -n "$(DATA)" || { echo "make: pass DATA=DIR, a data root holding MNIST/raw"; exit 2; }

bench: $(VENV_STAMP) need-data  ## the CPU sections of scripts/bench.py into docs/benchmarks.md: make bench DATA=DIR
	$(PY) scripts/bench.py overhead --data $(DATA)
	$(PY) scripts/bench.py peers --data $(DATA)  # skips, saying how to set up, without ../avalanche-venv
	$(PY) scripts/bench.py methods --data $(DATA)
	$(PY) scripts/bench.py scaling --data $(DATA)
	$(PY) scripts/bench.py threads --data $(DATA)

bench-gpu:  ## the GPU check on a GPU machine (scripts/gpu_check.sh; no registry: .gpu-deps/ from scripts/gpu_deps.sh)
	bash scripts/gpu_check.sh $(ARGS)

clean:  ## remove .venv and the run and sweep directories
	rm -rf .venv outputs/runs outputs/sweeps

# --- reproduction: each sweeps method × dataset pairs over 3 seeds into outputs/sweeps/repro-<name>/ and writes the
# report there. A pair composes its paper's setting by itself (cl_bench/conf/setting/<method>_<dataset>.yaml; the
# pairs that more than one paper ran pick theirs with setting=NAME); `cl-bench list` shows them all. No
# hyperparameter lives here: what a target adds is the run's bookkeeping (seeds, logger, checkpoints, sweep dir).
CL := .venv/bin/cl-bench
SEEDS ?= 0,1,2
REPRO := outputs/sweeps
QUIET := logger=none checkpoint.enabled=false seed=$(SEEDS)

.PHONY: need-data repro-baselines repro-cpg repro-gated repro-gated-cpu repro-nccl repro-nccl-mnist repro-nccl-cifar repro-nccl-calibration repro-gated-ladder repro-smoke

# The DER paper's S-MNIST and P-MNIST (setting/mammoth_*.yaml): each method with Mammoth's best arguments per
# buffer size; the methods the paper did not run with their own settings there (setting/<method>_<dataset>.yaml).
RB := $(REPRO)/repro-baselines
SMNIST_MEMORY := er,agem,der,derpp,icarl,er_ace,gdumb,bic,lucir
PMNIST_MEMORY := er,agem,der,derpp,er_ace,gdumb

repro-baselines: $(VENV_STAMP)  ## rehearsal baselines, memory 200 and 500, on S-MNIST and P-MNIST as the DER paper (CPU: about an hour)
	$(CL) train -m method=finetune,joint dataset=split_mnist $(QUIET) $(ARGS) hydra.sweep.dir=$(RB)/smnist/bounds
	$(CL) train -m method=$(SMNIST_MEMORY) dataset=split_mnist grid=buffers $(QUIET) $(ARGS) hydra.sweep.dir=$(RB)/smnist/memory
	$(CL) train -m method=finetune,joint dataset=permuted_mnist $(QUIET) $(ARGS) hydra.sweep.dir=$(RB)/pmnist/bounds
	$(CL) train -m method=$(PMNIST_MEMORY) dataset=permuted_mnist grid=buffers $(QUIET) $(ARGS) hydra.sweep.dir=$(RB)/pmnist/memory
	$(CL) report $(RB)

# CPG's cifar100_20 (setting/cpg_cifar100_20.yaml and its neighbours): every published row, honest (selection on
# validation data) and under the official protocol (what ivclab/CPG selects on, in its arithmetic).
RC := $(REPRO)/repro-cpg
CPG_ROWS := method=cpg,packnet,independent,finetune dataset=cifar100_20
PAE_ROW := method=cpg dataset=cifar100_20 setting=pae_cifar100_20

repro-cpg: $(VENV_STAMP)  ## CPG, PAE, PackNet, independent, finetune on cifar100_20 (VGG16-BN, GPU), honest and official
	$(CL) train -m $(CPG_ROWS) seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RC)/honest
	$(CL) train -m $(PAE_ROW) seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RC)/honest-pae
	$(CL) train -m $(CPG_ROWS) protocol=official seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RC)/official
	$(CL) train -m $(PAE_ROW) protocol=official seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RC)/official-pae
	$(CL) report $(RC)

# Abati et al. 2020's comparison (setting/gated_*, setting/abati_*): gated in both scenarios (the class scenario's
# task classifier fitted jointly, as the paper, and after each task: grid=task_classifier_fits); in the task scenario
# Joint, EWC-On, LwF and HAT (Split MNIST's conv net only: HAT converts plain chains); in the class scenario full
# replay (joint), iCaRL, A-GEM and ER at gated's memory (500). On Split MNIST the DER paper owns the pairs of
# joint, iCaRL, ER and A-GEM, so gated's baselines there are named settings.
RG := $(REPRO)/repro-gated
GATED_DATA := dataset=split_mnist,split_svhn,split_cifar10
RGB_RESNET := dataset=split_svhn,split_cifar10

repro-gated: $(VENV_STAMP)  ## gated against the paper's baselines on Split MNIST, SVHN, CIFAR-10, both scenarios (GPU)
	$(CL) train -m method=gated $(GATED_DATA) scenario=task seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/gated-task
	$(CL) train -m method=gated $(GATED_DATA) scenario=class grid=task_classifier_fits seed=$(SEEDS) $(ARGS) \
	    hydra.sweep.dir=$(RG)/gated-class
	$(CL) train -m method=ewc,lwf $(GATED_DATA) seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/task
	$(CL) train -m method=hat dataset=split_mnist seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/hat
	$(CL) train -m method=joint $(RGB_RESNET) scenario=task,class seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/joint
	$(CL) train -m method=joint dataset=split_mnist setting=abati_joint_split_mnist scenario=task,class seed=$(SEEDS) \
	    $(ARGS) hydra.sweep.dir=$(RG)/joint-mnist
	$(CL) train -m method=icarl,er,agem $(RGB_RESNET) seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/class
	$(CL) train -m method=icarl dataset=split_mnist setting=abati_icarl_split_mnist seed=$(SEEDS) $(ARGS) \
	    hydra.sweep.dir=$(RG)/class-mnist/icarl
	$(CL) train -m method=er dataset=split_mnist setting=abati_er_split_mnist seed=$(SEEDS) $(ARGS) \
	    hydra.sweep.dir=$(RG)/class-mnist/er
	$(CL) train -m method=agem dataset=split_mnist setting=abati_agem_split_mnist seed=$(SEEDS) $(ARGS) \
	    hydra.sweep.dir=$(RG)/class-mnist/agem
	$(CL) report $(RG)

# Abati et al. 2020's class-scenario claim at a CPU's size (setting/abati_cpu_*): gated against ER, iCaRL and A-GEM at
# memory 500 on every training image of Split MNIST (2 epochs a task) and on Split CIFAR-10 cut to 2,000 images a task
# (3 epochs), the conv net [32, 64, 64]; the report ranks the methods by RA with 95% intervals.
RGC := $(REPRO)/repro-gated-cpu
define NEWLINE


endef

repro-gated-cpu: $(VENV_STAMP)  ## gated vs ER, iCaRL, A-GEM at memory 500, class scenario, CPU-sized (REPRODUCING.md: about 2.5 hours)
	$(foreach d,split_mnist split_cifar10,$(foreach m,gated er icarl agem,$(CL) train -m method=$(m) dataset=$(d) \
	    setting=abati_cpu_$(m)_$(d) $(QUIET) $(ARGS) hydra.sweep.dir=$(RGC)/$(d)/$(m)$(NEWLINE)))
	$(CL) report $(RGC) --rank

# Gated without a task id as training lengthens (REPRODUCING.md has the plan): gated, ER and iCaRL in their CPU-sized
# class-scenario settings, the same 1,000 training images a task for all, at 2, 10 and 30 epochs a task, 3 seeds.
LADDER := dataset.samples_per_task=1000 grid=epoch_ladder seed=0,1,2 logger=none checkpoint.enabled=false
repro-gated-ladder: $(VENV_STAMP)  ## gated vs ER and iCaRL at 2, 10 and 30 epochs a task, Split MNIST, class scenario (CPU: about 3 hours)
	$(foreach m,gated er icarl,$(CL) train -m method=$(m) dataset=split_mnist setting=abati_cpu_$(m)_split_mnist \
	    $(LADDER) $(ARGS) hydra.sweep.dir=$(REPRO)/repro-gated-ladder/$(m)$(NEWLINE))
	$(PY) scripts/sweep_table.py $(REPRO)/repro-gated-ladder --by method.name method.epochs --versus er \
	    --also task_aware_avg_acc:% task_prediction_avg_acc:% capacity.val_task_accuracy_offline:% \
	    capacity.kernels_frozen

# La-MAML's three MNIST benchmarks (setting/gem_*: montrealrobotics/La-MAML, run_experiments.sh) and its Split
# CIFAR-100 (setting/la_split_cifar100 and its methods, single and multi pass): La-MAML with the lrs its script
# gives each benchmark, C-MAML and Sync (method=lamaml, named settings), NCCL, and ER, A-GEM and fine-tuning as
# La-MAML's own baselines (named la_* settings where the DER paper owns the pair). NCCL_SIZE and NCCL_MANY_SIZE
# cut the streams for a CPU (REPRODUCING.md states the cut it used).
RN := $(REPRO)/repro-nccl
NCCL_SIZE ?=
NCCL_MANY_SIZE ?=

repro-nccl: repro-nccl-mnist repro-nccl-cifar  ## NCCL against La-MAML, C-MAML, Sync, ER, A-GEM: MNIST and Split CIFAR-100

LA_ROT := dataset=rotated_mnist $(NCCL_SIZE) $(QUIET) $(ARGS)
LA_PERM := dataset=permuted_mnist $(NCCL_SIZE) $(QUIET) $(ARGS)
LA_MANY := dataset=permuted_mnist_many $(NCCL_MANY_SIZE) $(QUIET) $(ARGS)

# NCCL's calibration measured on the full GEM streams (1,000 samples a task, every test image), 5 seeds, the
# outer objective x beta of grid=nccl_calibration (REPRODUCING.md has the plan and the figures).
NCCL_FULL := dataset.samples_per_task=1000 dataset.test_samples_per_task=null logger=none checkpoint.enabled=false
repro-nccl-calibration: $(VENV_STAMP)  ## NCCL as is, with its calibration frozen, and under the paper's Eq. 5 (CPU: about an hour)
	$(CL) train -m method=nccl dataset=rotated_mnist,permuted_mnist grid=nccl_calibration seed=0,1,2,3,4 $(NCCL_FULL) \
	    $(ARGS) hydra.sweep.dir=$(RN)/calibration
	$(PY) scripts/sweep_table.py $(RN)/calibration --by method.outer_objective method.beta \
	    --versus seed 1.0 --capacity calibration_moved

repro-nccl-mnist: $(VENV_STAMP)  ## La-MAML's MNIST rotations, permutations and many permutations (CPU-sized: see REPRODUCING.md)
	$(CL) train -m method=nccl,lamaml,er,agem,finetune $(LA_ROT) hydra.sweep.dir=$(RN)/rotations/own
	$(CL) train -m method=lamaml setting=cmaml_rotated_mnist,sync_rotated_mnist $(LA_ROT) hydra.sweep.dir=$(RN)/rotations/maml
	$(CL) train -m method=nccl,lamaml $(LA_PERM) hydra.sweep.dir=$(RN)/permutations/own
	$(CL) train -m method=lamaml setting=cmaml_permuted_mnist,sync_permuted_mnist $(LA_PERM) \
	    hydra.sweep.dir=$(RN)/permutations/maml
	$(CL) train -m method=er setting=la_er_permuted_mnist $(LA_PERM) hydra.sweep.dir=$(RN)/permutations/er
	$(CL) train -m method=agem setting=la_agem_permuted_mnist $(LA_PERM) hydra.sweep.dir=$(RN)/permutations/agem
	$(CL) train -m method=finetune setting=la_finetune_permuted_mnist $(LA_PERM) hydra.sweep.dir=$(RN)/permutations/finetune
	$(CL) train -m method=nccl,lamaml,er,agem,finetune $(LA_MANY) hydra.sweep.dir=$(RN)/many/own
	$(CL) train -m method=lamaml setting=cmaml_permuted_mnist_many,sync_permuted_mnist_many $(LA_MANY) \
	    hydra.sweep.dir=$(RN)/many/maml
	$(CL) report $(RN)/rotations
	$(CL) report $(RN)/permutations
	$(CL) report $(RN)/many

repro-nccl-cifar: $(VENV_STAMP)  ## Split CIFAR-100, single and multi pass, as La-MAML's table (GPU)
	$(CL) train -m method=nccl,lamaml dataset=split_cifar100 $(QUIET) $(ARGS) hydra.sweep.dir=$(RN)/cifar-single/own
	$(CL) train -m method=lamaml dataset=split_cifar100 setting=cmaml_split_cifar100,sync_split_cifar100 $(QUIET) $(ARGS) \
	    hydra.sweep.dir=$(RN)/cifar-single/maml
	$(CL) train -m method=er dataset=split_cifar100 setting=la_er_split_cifar100 $(QUIET) $(ARGS) hydra.sweep.dir=$(RN)/cifar-single/er
	$(CL) train -m method=agem dataset=split_cifar100 setting=la_agem_split_cifar100 $(QUIET) $(ARGS) \
	    hydra.sweep.dir=$(RN)/cifar-single/agem
	$(CL) train -m method=nccl dataset=split_cifar100 setting=nccl_split_cifar100_multipass $(QUIET) $(ARGS) \
	    hydra.sweep.dir=$(RN)/cifar-multi/nccl
	$(CL) train -m method=lamaml dataset=split_cifar100 \
	    setting=lamaml_split_cifar100_multipass,cmaml_split_cifar100_multipass,sync_split_cifar100_multipass $(QUIET) \
	    $(ARGS) hydra.sweep.dir=$(RN)/cifar-multi/maml
	$(CL) train -m method=er dataset=split_cifar100 setting=la_er_split_cifar100_multipass $(QUIET) $(ARGS) \
	    hydra.sweep.dir=$(RN)/cifar-multi/er
	$(CL) train -m method=agem dataset=split_cifar100 setting=la_agem_split_cifar100_multipass $(QUIET) $(ARGS) \
	    hydra.sweep.dir=$(RN)/cifar-multi/agem
	$(CL) report $(RN)/cifar-single
	$(CL) report $(RN)/cifar-multi

repro-smoke: $(VENV_STAMP)  ## all three, CPU-sized on the embedded digits: minutes on 2 cores
	rm -rf $(REPRO)/repro-smoke
	$(CL) train -m experiment=cpg_split_digits,packnet_split_digits,gated_split_digits debug=smoke seed=0,1 logger=none \
	    hardware.threads=1 hydra.sweep.dir=$(REPRO)/repro-smoke/mask-and-gates
	$(CL) train -m experiment=nccl_split_digits method=nccl,agem,lamaml dataset.samples_per_task=100 seed=0,1 \
	    logger=none hardware.threads=1 hydra.sweep.dir=$(REPRO)/repro-smoke/online
	$(CL) report $(REPRO)/repro-smoke

# --- parity with the authors' code (docs/parity.md): each reference's rows over their seed plans (scripts/parity/
# plans.py: fixed from a pilot before the runs), from a checkout of the reference that you cloned at the pinned commit
# (REF=DIR; scripts/parity/<name>.py names the commit and its patches). PILOT=1 reruns the pilot's seeds, DIAG=NAME
# one of the reference's diagnostics.
# DATA=DIR is cl-bench's data.root (MNIST/raw, cifar-10-batches-py); PYREF is the interpreter that runs the reference
# (make parity-env: a venv over .venv's packages with the references' own requirements added).
PARITY_REFS := cpg mammoth hat lamaml cgate
# What the references import beyond torch, torchvision and numpy (Mammoth, La-MAML's ipdb, cgate's Lightning)
PARITY_REQUIREMENTS := kornia onedrivedownloader ftfy regex six timm==0.9.8 open_clip_torch ipdb tensorboardX \
    pytorch_lightning
PYREF ?= $(if $(wildcard .venv-parity/bin/python),.venv-parity/bin/python,$(PY))
.PHONY: parity parity-env parity-summary $(addprefix parity-,$(PARITY_REFS))

parity:  ## make parity-NAME REF=DIR DATA=DIR [ROWS=..] [PILOT=1] [PARITY_SEEDS=..] [RESUME=1] [DIAG=name], NAME: cpg mammoth hat lamaml cgate
	@echo "make parity-NAME REF=DIR DATA=DIR, NAME one of: $(PARITY_REFS); then make parity-summary"

# ref-given-NAME first: a missing REF is refused before .venv would be built
$(addprefix parity-,$(PARITY_REFS)): parity-%: ref-given-% $(VENV_STAMP)
	$(PY) scripts/parity/$*.py --ref $(REF) --python $(PYREF) $(if $(DATA),--data-root $(DATA)) \
	    $(if $(ROWS),--rows $(ROWS)) $(if $(PILOT),--pilot) $(if $(PARITY_SEEDS),--seeds $(PARITY_SEEDS)) \
	    $(if $(RESUME),--resume) $(if $(DIAG),--diagnostic $(DIAG))

ref-given-%:
	@test -n "$(REF)" || { echo "make: pass REF=DIR, a checkout of the reference (scripts/parity/$*.py says which)"; exit 2; }

parity-env: $(VENV_STAMP)  ## .venv-parity: .venv's packages (through a .pth file) plus the references' own requirements
	python3 -m venv .venv-parity
	$(PY) -c "import site; print(site.getsitepackages()[0])" > \
	    "$$(.venv-parity/bin/python -c 'import site; print(site.getsitepackages()[0])')/cl_bench_venv.pth"
	.venv-parity/bin/pip install $(PARITY_REQUIREMENTS)

parity-summary: $(VENV_STAMP)  ## docs/parity.md and docs/parity.json from the runs' records (outputs/parity)
	$(PY) scripts/parity/summary.py
