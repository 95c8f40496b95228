#!/usr/bin/env bash
# Train a drafter on several machines under SLURM: one `accelerate launch` per node (srun starts
# one task per node), every node with its own machine rank, the job's first node as the
# rendezvous host. The accelerate config says the mode (DDP, ZeRO-3); this script fills in what
# only SLURM knows.
#
#   sbatch --nodes=2 --ntasks-per-node=1 --gpus-per-node=8 --cpus-per-task=32 \
#          scripts/slurm_train.sh configs/accelerate/multinode_zero3.yaml configs/<target>/eagle3.yaml [--a.b=value ...]
#
# Environment: PROCESSES_PER_NODE (default: the node's GPUs, else 1), MAIN_PORT (default 29500 +
# job id mod 1000, so two jobs on one node do not collide), DRY_RUN=1 prints the command instead.
# The output folder (checkpoint.output_dir) must be on a filesystem every node sees: checkpoints
# are written once, by the global main process; each process's RNG state goes beside them.
# Resume after a preemption: resubmit the same command with --resume.
#SBATCH --job-name=draftsmith-train
#SBATCH --ntasks-per-node=1
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: sbatch --nodes=N scripts/slurm_train.sh ACCELERATE_CONFIG RECIPE [overrides...]" >&2
  exit 2
fi
config=$1; recipe=$2; shift 2
: "${SLURM_JOB_NODELIST:?not inside a SLURM job (run it with sbatch or salloc)}"
nodes=${SLURM_NNODES:-1}
# The whole list first, then its first name: `scontrol ... | head -n 1` under pipefail exits 141
# whenever head closes the pipe before scontrol has written every name (SIGPIPE).
hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
main_host=${hosts%%$'\n'*}
if [[ -z $main_host ]]; then
  echo "scontrol show hostnames \"$SLURM_JOB_NODELIST\" named no host" >&2
  exit 2
fi
port=${MAIN_PORT:-$((29500 + ${SLURM_JOB_ID:-0} % 1000))}
if [[ -z ${PROCESSES_PER_NODE:-} ]]; then
  PROCESSES_PER_NODE=$(python3 -c "import torch; print(max(1, torch.cuda.device_count()))" 2>/dev/null || echo 1)
fi
total=$((nodes * PROCESSES_PER_NODE))
# Runs on each node (srun: one task per node); SLURM_NODEID is that node's rank, read there.
launch='accelerate launch --config_file "$0" --num_machines "$1" --num_processes "$2" --machine_rank "$SLURM_NODEID" \
  --main_process_ip "$3" --main_process_port "$4" -m draftsmith.train "${@:5}"'
if [[ ${DRY_RUN:-0} == 1 ]]; then
  echo "accelerate launch --config_file $config --num_machines $nodes --num_processes $total --machine_rank ${SLURM_NODEID:-0}" \
       "--main_process_ip $main_host --main_process_port $port -m draftsmith.train $recipe $*"
  exit 0
fi
exec srun --ntasks-per-node=1 bash -c "$launch" "$config" "$nodes" "$total" "$main_host" "$port" "$recipe" "$@"
