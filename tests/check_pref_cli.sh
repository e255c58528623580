#!/bin/sh
# check_pref_cli.sh — preference tuning from the command line (run by `make test`; docs/PREFERENCE.md):
#   - `afinar check --task dpo` reports the pairs (kept, dropped for a prompt that fills
#     --max-seq-len, identical chosen/rejected) and the plan, exit 0;
#   - a malformed pair is refused naming file, line and field, exit non-zero;
#   - TRL's names in a YAML config (beta, loss_type, precompute_ref_log_probs) reach the settings;
#   - `afinar train --task dpo` (1 step on SmolLM2, 2 pairs) writes TRL's metric names, an evaluation
#     line, and an adapter recording trained_with dpo; --loss-type on causal-lm is refused.
# Needs AFINAR_BIN (make test sets it) and models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/setup.sh);
# skipped without them. Prints the RESULT line run_all.sh sums.
bin=${AFINAR_BIN:-build/afinar}
model=${AF_SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
if [ ! -x "$bin" ] || [ ! -f "$model" ]; then
    echo "SKIP: AFINAR_BIN or $model missing (make test sets AFINAR_BIN; scripts/setup.sh fetches the model)"
    echo "RESULT check_pref_cli passed=0 failed=0 skipped=1"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/afinar_pref_XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/pairs.jsonl" <<'J'
{"prompt": "The capital of France is", "chosen": " Paris.", "rejected": " Berlin."}
{"prompt": "Cats are", "chosen": " animals.", "rejected": " animals."}
{"prompt": "Once upon a time there was a very long prompt that fills every token we allow here", "chosen": " x", "rejected": " y"}
{"prompt": "2 + 2 =", "chosen": " 4", "rejected": " 5"}
J
"$bin" check -m "$model" --train "$tmp/pairs.jsonl" --task dpo --max-seq-len 12 > "$tmp/check.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "check --task dpo: exit $rc"
grep -q "pairs          4 read, 3 kept, 1 dropped (1: prompt fills max_seq_len 12" "$tmp/check.txt" && ok ||
    bad "check: the pair whose prompt fills max_seq_len is reported dropped"
grep -q "1 with chosen == rejected" "$tmp/check.txt" && grep -q "warning: 1 pair with chosen == rejected (first at line 2)" "$tmp/check.txt" &&
    ok || bad "check: the identical pair is reported"
grep -q "plan: preference (dpo)" "$tmp/check.txt" && grep -q "reference: the base model (the adapter off), computed once" "$tmp/check.txt" &&
    ok || bad "check: the preference plan"
printf '{"prompt": "a", "chosen": "b", "rejected": "c"}\n{"prompt": "a", "chosen": "b"}\n' > "$tmp/bad.jsonl"
"$bin" check -m "$model" --train "$tmp/bad.jsonl" --task dpo > "$tmp/bad.txt" 2>&1 && bad "a pair without 'rejected' accepted" ||
    { grep -q "bad.jsonl:2: field 'rejected': missing" "$tmp/bad.txt" && ok || bad "bad pair: message $(cat "$tmp/bad.txt")"; }
printf 'task: dpo\nbeta: 0.2\nloss_type: ipo\nprecompute_ref_log_probs: false\n' > "$tmp/cfg.yaml"
"$bin" check -m "$model" --train "$tmp/pairs.jsonl" --config "$tmp/cfg.yaml" > "$tmp/cfg.txt" 2>&1
grep -q "beta 0.2 (" "$tmp/cfg.txt" && grep -q "loss-type ipo (" "$tmp/cfg.txt" &&
    grep -q "precompute-ref off (" "$tmp/cfg.txt" && ok || bad "YAML: TRL's beta, loss_type, precompute_ref_log_probs"
"$bin" train -m "$model" --train "$tmp/pairs.jsonl" --val "$tmp/pairs.jsonl" --task dpo --max-seq-len 32 --batch 2 \
    --grad-accum 1 --max-steps 1 -t 1 --no-plot -o "$tmp/run" > "$tmp/train.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "train --task dpo: exit $rc: $(tail -n 3 "$tmp/train.txt")"
grep '"type":"train"' "$tmp/run/metrics.jsonl" 2>/dev/null | grep -q '"rewards/accuracies":.*"logps/rejected":' && ok ||
    bad "metrics.jsonl: a train line with TRL's names"
grep -q '"type":"eval".*"eval_rewards/accuracies":' "$tmp/run/metrics.jsonl" 2>/dev/null && ok || bad "metrics.jsonl: an eval line"
grep -q '"trained_with":[[:space:]]*"dpo"' "$tmp/run/final/afinar.json" 2>/dev/null && ok || bad "final/afinar.json: trained_with dpo"
"$bin" check -m "$model" --train "$tmp/pairs.jsonl" --task causal-lm --loss-type ipo > "$tmp/lt.txt" 2>&1 &&
    bad "--loss-type with causal-lm accepted" || { grep -q "loss-type applies to --task dpo" "$tmp/lt.txt" && ok || bad "--loss-type: $(cat "$tmp/lt.txt")"; }
echo "RESULT check_pref_cli passed=$pass failed=$fail skipped=0"
[ $fail -eq 0 ]
