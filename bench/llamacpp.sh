#!/usr/bin/env bash
# llama.cpp's Vulkan backend and vkx on the same random-weight Llama folder, in one run: the table of
# docs/benchmarks.md ("LLM decode and prefill against llama.cpp's Vulkan backend").
#
#   bash bench/llamacpp.sh LLAMACPP_DIR [preset]      (preset: 1b (default), small, tiny)
#
# LLAMACPP_DIR holds a llama.cpp build with its Vulkan backend (bin.tar.xz: llama-bench,
# llama-quantize), its convert_hf_to_gguf.py (convert/, with its gguf package as wheels in whl/)
# and make_model.py, which writes the random folder (the workplace's peer kit). The folder is made
# once, converted to GGUF f16 and Q4_0, and `llama-bench -p 512 -n 128 -ngl 99 -r 3` runs both;
# then bench/generate.py on the same folder, fp16 and int4 (vkx twice, torch eager on the same
# module, transformers' generate; a 512-token prompt, 128 new tokens), and `vkx generate --json` of
# the fp16 and int4 exports, each in a process of its own, as a user runs it. Results under $OUT (default
# /tmp/vkx-llamacpp/out).
set -o pipefail
D=${1:?usage: bench/llamacpp.sh LLAMACPP_DIR [preset]}; PRESET=${2:-1b}
W=/tmp/vkx-llamacpp; O=${OUT:-$W/out}; mkdir -p "$W/bin" "$W/site" "$O"; S=$SECONDS
python3 -c "import tarfile, sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$D/bin.tar.xz" "$W/bin" && chmod +x "$W"/bin/*
ldd "$W/bin/llama-bench" | grep -q "not found" && export LD_LIBRARY_PATH=$D/lib
export NO_LOCAL_GGUF=1
python3 -m pip install -q --no-index --no-deps --target "$W/site" "$D"/whl/*.whl || exit 1
# the converter imports sentencepiece before it looks for tokenizer.model, which this folder lacks
python3 -c "import sentencepiece" 2>/dev/null || { mkdir -p "$W/stub"; echo 'class SentencePieceProcessor: pass' > "$W/stub/sentencepiece.py"; }
python3 "$D/make_model.py" "$W/model" --preset "$PRESET" --dtype bf16 > /dev/null || exit 1
PYTHONPATH=$W/site:$W/stub:$PYTHONPATH python3 "$D/convert/convert_hf_to_gguf.py" "$W/model" --outtype f16 \
    --outfile "$W/f16.gguf" > "$O/convert.log" 2>&1 || { tail "$O/convert.log"; exit 1; }
"$W/bin/llama-quantize" "$W/f16.gguf" "$W/q4_0.gguf" q4_0 > /dev/null 2>&1 || exit 1
echo "prepared: $((SECONDS - S)) s"
"$W/bin/llama-bench" -m "$W/f16.gguf" -m "$W/q4_0.gguf" -p 512 -n 128 -ngl 99 -r 3 -o md 2>/dev/null | tee "$O/llamacpp.md"
for quant in "" int4; do
    python3 bench/generate.py "$W/model" --dtype fp16 ${quant:+--quantize $quant} --prompt-len 512 --max-seq-len 640 \
        --prefill-len 512 --new-tokens 128 2>/dev/null | tee "$O/generate_fp16${quant:+_$quant}.txt" || exit 1
done
ids=$(python3 -c "import random; r = random.Random(0); print(','.join(str(r.randrange(3, 32000)) for _ in range(512)))")
for quant in "" int4; do
    f=fp16${quant:+_$quant}
    python3 -m vkx export "$W/model" -o "$W/$f.pte" --dtype fp16 ${quant:+--quantize $quant} --max-seq-len 640 \
        --prefill-len 512 --json > "$O/vkx_export_$f.json" || exit 1
    python3 -m vkx generate "$W/$f.pte" --prompt-ids "$ids" --max-new-tokens 128 --json > "$O/vkx_generate_$f.json" || exit 1
    python3 -c "import json, sys; t = open(sys.argv[1]).read(); d = json.loads(t[:t.rindex('}') + 1]); d.pop('tokens'); print(d)" \
        "$O/vkx_generate_$f.json"
done
echo "total: $((SECONDS - S)) s"
