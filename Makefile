# Every target installs what it needs into .venv first, so each works on a fresh clone. `make help` lists them.
PY := .venv/bin/python
VENV_STAMP := .venv/.installed

.PHONY: help install run test lint bench bench-gpu clean

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
	$(PY) -m pytest -q -n 2

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

bench-gpu: $(VENV_STAMP)  ## the GPU check (scripts/gpu_check.sh, < 8 min): make bench-gpu CIFAR10=SRC
	@test -n "$(CIFAR10)" || { echo "make: pass CIFAR10=SRC (cifar-10-python.tar.gz, an image folder or an .npz)"; exit 2; }
	bash scripts/gpu_check.sh $(CIFAR10)

clean:  ## remove .venv and the run and sweep directories
	rm -rf .venv outputs/runs outputs/sweeps

# --- reproduction: each sweeps 3 seeds into outputs/sweeps/repro-<name>/ and writes the report there -----------
CL := .venv/bin/cl-bench
SEEDS ?= 0,1,2
REPRO := outputs/sweeps

.PHONY: need-data repro-baselines repro-cpg repro-gated repro-nccl repro-nccl-mnist repro-nccl-cifar repro-smoke

# The DER paper's (Buzzega et al. 2020) S-MNIST (class-IL: 5 × 2 classes, all of MNIST) and P-MNIST (domain-IL:
# 20 permutations of all of MNIST) settings: MLP 2×100, one epoch, plain SGD; each method's lr, replay batch and
# loss weights per memory size are Mammoth's utils/best_args.py (seq-mnist, perm-mnist), which the paper's
# tables used, on pixels scaled to [0, 1] without normalisation as Mammoth feeds MNIST. Methods the paper did not
# run keep their own defaults for one epoch, at the benchmark's batch size (BiC, LUCIR) or their own (ER-ACE: 10;
# GDumb: 16, and its official MNIST schedule of 128 epochs on the memory).
SMNIST := dataset=split_mnist dataset.normalize=false scenario=class backbone=mlp backbone.hidden_sizes=[100,100] method.epochs=1 \
    method.batch_size=10 method.momentum=0 logger=none checkpoint.enabled=false seed=$(SEEDS)
PMNIST := dataset=permuted_mnist dataset.normalize=false dataset.num_tasks=20 dataset.samples_per_task=null scenario=class backbone=mlp \
    backbone.hidden_sizes=[100,100] method.epochs=1 method.batch_size=128 method.momentum=0 logger=none \
    checkpoint.enabled=false seed=$(SEEDS)
RB := $(REPRO)/repro-baselines

repro-baselines: $(VENV_STAMP)  ## rehearsal baselines, memory 200 and 500, on S-MNIST and P-MNIST as the DER paper (CPU: about an hour)
	$(CL) train -m $(SMNIST) method=finetune method.lr=0.03 $(ARGS) hydra.sweep.dir=$(RB)/smnist/finetune
	$(CL) train -m $(SMNIST) method=joint method.lr=0.03 $(ARGS) hydra.sweep.dir=$(RB)/smnist/joint
	$(CL) train -m $(SMNIST) method=er method.memory_size=200 method.lr=0.01 method.replay_batch_size=10 $(ARGS) hydra.sweep.dir=$(RB)/smnist/er200
	$(CL) train -m $(SMNIST) method=er method.memory_size=500 method.lr=0.1 method.replay_batch_size=10 $(ARGS) hydra.sweep.dir=$(RB)/smnist/er500
	$(CL) train -m $(SMNIST) method=agem method.memory_size=200,500 method.lr=0.1 method.replay_batch_size=128 $(ARGS) hydra.sweep.dir=$(RB)/smnist/agem
	$(CL) train -m $(SMNIST) method=der method.memory_size=200 method.lr=0.03 method.replay_batch_size=10 method.alpha=0.2 $(ARGS) hydra.sweep.dir=$(RB)/smnist/der200
	$(CL) train -m $(SMNIST) method=der method.memory_size=500 method.lr=0.03 method.replay_batch_size=128 method.alpha=1.0 $(ARGS) hydra.sweep.dir=$(RB)/smnist/der500
	$(CL) train -m $(SMNIST) method=derpp method.memory_size=200 method.lr=0.03 method.replay_batch_size=128 method.alpha=0.2 method.beta=1.0 $(ARGS) hydra.sweep.dir=$(RB)/smnist/derpp200
	$(CL) train -m $(SMNIST) method=derpp method.memory_size=500 method.lr=0.03 method.replay_batch_size=10 method.alpha=1.0 method.beta=0.5 $(ARGS) hydra.sweep.dir=$(RB)/smnist/derpp500
	$(CL) train -m $(SMNIST) method=icarl method.memory_size=200,500 method.lr=0.1 method.weight_decay=0 method.lr_milestones=[] $(ARGS) hydra.sweep.dir=$(RB)/smnist/icarl
	$(CL) train -m $(SMNIST) method=er_ace method.memory_size=200,500 $(ARGS) hydra.sweep.dir=$(RB)/smnist/er_ace
	$(CL) train -m $(SMNIST) method=gdumb method.memory_size=200,500 method.epochs=128 method.batch_size=16 method.momentum=0.9 method.regularization=none $(ARGS) hydra.sweep.dir=$(RB)/smnist/gdumb
	$(CL) train -m $(SMNIST) method=bic method.memory_size=200,500 method.momentum=0.9 $(ARGS) hydra.sweep.dir=$(RB)/smnist/bic
	$(CL) train -m $(SMNIST) method=lucir method.memory_size=200,500 method.momentum=0.9 $(ARGS) hydra.sweep.dir=$(RB)/smnist/lucir
	$(CL) train -m $(PMNIST) method=finetune method.lr=0.2 $(ARGS) hydra.sweep.dir=$(RB)/pmnist/finetune
	$(CL) train -m $(PMNIST) method=joint method.lr=0.2 $(ARGS) hydra.sweep.dir=$(RB)/pmnist/joint
	$(CL) train -m $(PMNIST) method=er method.memory_size=200,500 method.lr=0.2 method.replay_batch_size=128 $(ARGS) hydra.sweep.dir=$(RB)/pmnist/er
	$(CL) train -m $(PMNIST) method=agem method.memory_size=200,500 method.lr=0.1 method.replay_batch_size=128 $(ARGS) hydra.sweep.dir=$(RB)/pmnist/agem
	$(CL) train -m $(PMNIST) method=der method.memory_size=200,500 method.lr=0.2 method.replay_batch_size=128 method.alpha=1.0 $(ARGS) hydra.sweep.dir=$(RB)/pmnist/der
	$(CL) train -m $(PMNIST) method=derpp method.memory_size=200 method.lr=0.1 method.replay_batch_size=128 method.alpha=1.0 method.beta=1.0 $(ARGS) hydra.sweep.dir=$(RB)/pmnist/derpp200
	$(CL) train -m $(PMNIST) method=derpp method.memory_size=500 method.lr=0.2 method.replay_batch_size=128 method.alpha=1.0 method.beta=0.5 $(ARGS) hydra.sweep.dir=$(RB)/pmnist/derpp500
	$(CL) train -m $(PMNIST) method=er_ace method.memory_size=200,500 method.batch_size=10 $(ARGS) hydra.sweep.dir=$(RB)/pmnist/er_ace
	$(CL) train -m $(PMNIST) method=gdumb method.memory_size=200,500 method.epochs=128 method.batch_size=16 method.momentum=0.9 method.regularization=none $(ARGS) hydra.sweep.dir=$(RB)/pmnist/gdumb
	$(CL) report $(RB)

repro-cpg: $(VENV_STAMP)  ## CPG, PAE, PackNet, independent, finetune on cifar100_20 (VGG16-BN, GPU), honest and official
	$(CL) train -m experiment=cpg_cifar100_20,pae_cifar100_20,packnet_cifar100_20,independent_cifar100_20,finetune_cifar100_20 \
	    seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(REPRO)/repro-cpg/honest
	$(CL) train -m experiment=cpg_cifar100_20,pae_cifar100_20 method.protocol=official \
	    seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(REPRO)/repro-cpg/official
	$(CL) report $(REPRO)/repro-cpg

# Abati et al. 2020's comparison: in the task scenario Joint, EWC-On, LwF and HAT; in the class scenario full
# replay (joint), iCaRL, A-GEM and ER at gated's memory (500). Every method but A-GEM (online: one pass, its
# own SGD) trains under the abati_* presets' optimiser and epochs. HAT converts plain chains only (mlp,
# convnet, vgg16_bn), so it runs on Split MNIST's convnet and not on the ResNet-18 of SVHN and CIFAR-10, and
# with a batch norm per task: the official BN-free conversion of our convnet stays at chance on split_digits.
RG := $(REPRO)/repro-gated
ABATI := experiment=abati_split_mnist,abati_split_svhn,abati_split_cifar10
GATED := experiment=gated_split_mnist,gated_split_svhn,gated_split_cifar10

repro-gated: $(VENV_STAMP)  ## gated against the paper's baselines on Split MNIST, SVHN, CIFAR-10, both scenarios (GPU)
	$(CL) train -m $(GATED) scenario=task,class seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/gated
	$(CL) train -m $(GATED) scenario=class method.task_classifier_fit=after_task seed=$(SEEDS) $(ARGS) \
	    hydra.sweep.dir=$(RG)/gated-after-task
	$(CL) train -m $(ABATI) method=joint scenario=task,class seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/joint
	$(CL) train -m $(ABATI) method=ewc method.online=true scenario=task seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/ewc-on
	$(CL) train -m $(ABATI) method=lwf scenario=task seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/lwf
	$(CL) train -m experiment=abati_split_mnist method=hat method.batch_norm=per_task scenario=task seed=$(SEEDS) $(ARGS) \
	    hydra.sweep.dir=$(RG)/hat
	$(CL) train -m $(ABATI) method=icarl method.memory_size=500 scenario=class seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/icarl
	$(CL) train -m $(ABATI) method=er method.memory_size=500 scenario=class seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/er
	$(CL) train -m dataset=split_mnist backbone=convnet backbone.channels=[100,100,100] method=agem \
	    method.memory_size=500 scenario=class seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/agem-mnist
	$(CL) train -m dataset=split_svhn,split_cifar10 backbone=resnet18 method=agem method.memory_size=500 \
	    scenario=class seed=$(SEEDS) $(ARGS) hydra.sweep.dir=$(RG)/agem-resnet
	$(CL) report $(RG)

# La-MAML's three MNIST benchmarks (montrealrobotics/La-MAML, run_experiments.sh): 20 rotations and 20 permutations
# of 1,000 samples with 200 memories and 5 glances, 100 permutations of 200 with 500 memories; batch 10, replay 10.
# La-MAML, C-MAML and Sync with the lrs that script gives each benchmark; NCCL, ER and A-GEM on the same budget, ER
# and A-GEM as La-MAML's own baselines (norm clipping 2.0; ER replays from the first batch, A-GEM's reference is the
# mean over past tasks of each one's gradient on its ring share). NCCL_SIZE and NCCL_MANY_SIZE cut the streams for
# a CPU (REPRODUCING.md states the cut it used).
RN := $(REPRO)/repro-nccl
NCCL_SIZE ?=
NCCL_MANY_SIZE ?=
ONLINE_RUN := logger=none checkpoint.enabled=false seed=$(SEEDS)
ROT := experiment=gem_rotated_mnist $(NCCL_SIZE) $(ONLINE_RUN)
PERM := experiment=gem_permuted_mnist $(NCCL_SIZE) $(ONLINE_RUN)
MANY := experiment=gem_permuted_mnist_many $(NCCL_MANY_SIZE) $(ONLINE_RUN)
M500 := method.memory_size=500
LA_ER := method=er method.epochs=1 method.batch_size=10 method.optimizer=sgd method.momentum=0 method.lr=0.1 \
    method.replay_batch_size=10 method.grad_clip_norm=2.0 method.replay_in_first_task=true
LA_AGEM := method=agem method.memory_policy=ring method.reference=per_task method.grad_clip_norm=2.0
ONLINE_FINETUNE := method=finetune method.epochs=1 method.batch_size=10 method.optimizer=sgd method.momentum=0 method.lr=0.1
CMAML := method=lamaml method.learn_lr=false method.sync_update=true
SYNC := method=lamaml method.sync_update=true

repro-nccl: repro-nccl-mnist repro-nccl-cifar  ## NCCL against La-MAML, C-MAML, Sync, ER, A-GEM: MNIST and Split CIFAR-100

repro-nccl-mnist: $(VENV_STAMP)  ## La-MAML's MNIST rotations, permutations and many permutations (CPU-sized: see REPRODUCING.md)
	$(CL) train -m $(ROT) method=nccl $(ARGS) hydra.sweep.dir=$(RN)/rotations/nccl
	$(CL) train -m $(ROT) method=lamaml $(ARGS) hydra.sweep.dir=$(RN)/rotations/lamaml
	$(CL) train -m $(ROT) $(CMAML) method.weight_lr=0.1 method.alpha_init=0.1 $(ARGS) hydra.sweep.dir=$(RN)/rotations/cmaml
	$(CL) train -m $(ROT) $(SYNC) method.outer_lr=0.1 method.weight_lr=0.3 method.alpha_init=0.15 $(ARGS) \
	    hydra.sweep.dir=$(RN)/rotations/sync
	$(CL) train -m $(ROT) $(LA_ER) method.memory_size=200 method.glances=5 $(ARGS) hydra.sweep.dir=$(RN)/rotations/er
	$(CL) train -m $(ROT) $(LA_AGEM) method.inner_steps=5 $(ARGS) hydra.sweep.dir=$(RN)/rotations/agem
	$(CL) train -m $(ROT) $(ONLINE_FINETUNE) $(ARGS) hydra.sweep.dir=$(RN)/rotations/finetune
	$(CL) train -m $(PERM) method=nccl $(ARGS) hydra.sweep.dir=$(RN)/permutations/nccl
	$(CL) train -m $(PERM) method=lamaml $(ARGS) hydra.sweep.dir=$(RN)/permutations/lamaml
	$(CL) train -m $(PERM) $(CMAML) method.weight_lr=0.1 method.alpha_init=0.03 $(ARGS) hydra.sweep.dir=$(RN)/permutations/cmaml
	$(CL) train -m $(PERM) $(SYNC) method.outer_lr=0.1 method.weight_lr=0.1 method.alpha_init=0.15 $(ARGS) \
	    hydra.sweep.dir=$(RN)/permutations/sync
	$(CL) train -m $(PERM) $(LA_ER) method.memory_size=200 method.glances=5 $(ARGS) hydra.sweep.dir=$(RN)/permutations/er
	$(CL) train -m $(PERM) $(LA_AGEM) method.inner_steps=5 $(ARGS) hydra.sweep.dir=$(RN)/permutations/agem
	$(CL) train -m $(PERM) $(ONLINE_FINETUNE) $(ARGS) hydra.sweep.dir=$(RN)/permutations/finetune
	$(CL) train -m $(MANY) method=nccl $(M500) method.inner_steps=10 $(ARGS) hydra.sweep.dir=$(RN)/many/nccl
	$(CL) train -m $(MANY) method=lamaml $(M500) method.inner_steps=10 method.outer_lr=0.1 method.alpha_init=0.1 $(ARGS) \
	    hydra.sweep.dir=$(RN)/many/lamaml
	$(CL) train -m $(MANY) $(CMAML) $(M500) method.weight_lr=0.15 method.alpha_init=0.03 $(ARGS) hydra.sweep.dir=$(RN)/many/cmaml
	$(CL) train -m $(MANY) $(SYNC) $(M500) method.inner_steps=10 method.outer_lr=0.1 method.weight_lr=0.03 method.alpha_init=0.03 \
	    $(ARGS) hydra.sweep.dir=$(RN)/many/sync
	$(CL) train -m $(MANY) $(LA_ER) $(M500) method.glances=10 $(ARGS) hydra.sweep.dir=$(RN)/many/er
	$(CL) train -m $(MANY) $(LA_AGEM) $(M500) method.inner_steps=10 $(ARGS) hydra.sweep.dir=$(RN)/many/agem
	$(CL) train -m $(MANY) $(ONLINE_FINETUNE) $(ARGS) hydra.sweep.dir=$(RN)/many/finetune
	$(CL) report $(RN)/rotations
	$(CL) report $(RN)/permutations
	$(CL) report $(RN)/many

# La-MAML's Split CIFAR-100 (20 × 5, task scenario, 200 memories, batch 10): its BN-free pc_cnn with crop, flip and
# brightness jitter, single pass (glances as its script) and multi pass (10 epochs, 1 glance); La-MAML with
# second-order steps over 5 chunks, no relu, clipping 1.0. NCCL on the reduced ResNet-18 of its paper. GPU-sized.
LA_CIFAR := experiment=gem_split_cifar100 backbone=pc_cnn dataset.augment=true dataset.brightness_jitter=0.247 $(ONLINE_RUN)
LA_CIFAR_META := method.second_order=true method.trajectory_chunks=5 method.inner_relu=false method.memory_size=200
LA_CIFAR_ER := method=er method.batch_size=10 method.optimizer=sgd method.momentum=0 method.lr=0.03 method.memory_size=200 \
    method.replay_batch_size=1 method.grad_clip_norm=2.0 method.replay_in_first_task=true
LA_CIFAR_AGEM := $(LA_AGEM) method.lr=0.03 method.memory_size=200
LAMAML_CIFAR := method=lamaml $(LA_CIFAR_META) method.inner_clip=1.0 method.grad_clip_norm=1.0 method.outer_lr=0.25 \
    method.alpha_init=0.1
CMAML_CIFAR := $(CMAML) $(LA_CIFAR_META) method.inner_clip=2.0 method.alpha_init=0.075 method.weight_lr=0.075
SYNC_CIFAR := $(SYNC) $(LA_CIFAR_META) method.inner_clip=2.0 method.outer_lr=0.35 method.alpha_init=0.1 method.weight_lr=0.1

repro-nccl-cifar: $(VENV_STAMP)  ## Split CIFAR-100, single and multi pass, as La-MAML's table (GPU)
	$(CL) train -m experiment=gem_split_cifar100 method=nccl $(ONLINE_RUN) $(ARGS) hydra.sweep.dir=$(RN)/cifar-single/nccl
	$(CL) train -m $(LA_CIFAR) $(LAMAML_CIFAR) method.inner_steps=10 $(ARGS) hydra.sweep.dir=$(RN)/cifar-single/lamaml
	$(CL) train -m $(LA_CIFAR) $(CMAML_CIFAR) method.inner_steps=2 $(ARGS) hydra.sweep.dir=$(RN)/cifar-single/cmaml
	$(CL) train -m $(LA_CIFAR) $(SYNC_CIFAR) method.inner_steps=5 $(ARGS) hydra.sweep.dir=$(RN)/cifar-single/sync
	$(CL) train -m $(LA_CIFAR) $(LA_CIFAR_ER) method.epochs=1 method.glances=10 $(ARGS) hydra.sweep.dir=$(RN)/cifar-single/er
	$(CL) train -m $(LA_CIFAR) $(LA_CIFAR_AGEM) method.inner_steps=2 $(ARGS) hydra.sweep.dir=$(RN)/cifar-single/agem
	$(CL) train -m experiment=gem_split_cifar100 method=nccl method.epochs=10 method.inner_steps=1 $(ONLINE_RUN) $(ARGS) \
	    hydra.sweep.dir=$(RN)/cifar-multi/nccl
	$(CL) train -m $(LA_CIFAR) $(LAMAML_CIFAR) method.epochs=10 method.inner_steps=1 $(ARGS) hydra.sweep.dir=$(RN)/cifar-multi/lamaml
	$(CL) train -m $(LA_CIFAR) $(CMAML_CIFAR) method.epochs=10 method.inner_steps=1 $(ARGS) hydra.sweep.dir=$(RN)/cifar-multi/cmaml
	$(CL) train -m $(LA_CIFAR) $(SYNC_CIFAR) method.epochs=10 method.inner_steps=1 $(ARGS) hydra.sweep.dir=$(RN)/cifar-multi/sync
	$(CL) train -m $(LA_CIFAR) $(LA_CIFAR_ER) method.epochs=10 method.glances=1 $(ARGS) hydra.sweep.dir=$(RN)/cifar-multi/er
	$(CL) train -m $(LA_CIFAR) $(LA_CIFAR_AGEM) method.epochs=10 method.inner_steps=1 $(ARGS) hydra.sweep.dir=$(RN)/cifar-multi/agem
	$(CL) report $(RN)/cifar-single
	$(CL) report $(RN)/cifar-multi

repro-smoke: $(VENV_STAMP)  ## all three, CPU-sized on the embedded digits: minutes on 2 cores
	rm -rf $(REPRO)/repro-smoke
	$(CL) train -m experiment=cpg_split_digits,packnet_split_digits,gated_split_digits seed=0,1 logger=none \
	    method.epochs=3 hardware.threads=1 hydra.sweep.dir=$(REPRO)/repro-smoke/mask-and-gates
	$(CL) train -m experiment=nccl_split_digits method=nccl,agem,lamaml dataset.samples_per_task=100 seed=0,1 \
	    logger=none hardware.threads=1 hydra.sweep.dir=$(REPRO)/repro-smoke/online
	$(CL) report $(REPRO)/repro-smoke
