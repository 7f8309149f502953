# CLI smoke tests: exit codes and key output of the subcommands.
set(_expect ${CMAKE_SOURCE_DIR}/tests/cli/expect.sh)
set(_cfg ${CMAKE_SOURCE_DIR}/tests/cli/data)
function(dlrun_cli_test name code regex)
  add_test(NAME cli:${name} COMMAND ${_expect} ${code} ${regex} -- $<TARGET_FILE:dlrun> ${ARGN})
  set_tests_properties(cli:${name} PROPERTIES LABELS cli)
endfunction()

dlrun_cli_test(help 0 "Exit codes:.*" --help)
dlrun_cli_test(version 0 "^dlrun [0-9]+\\.[0-9]+\\.[0-9]+ \\(git .*, torch [0-9.]+" --version)
dlrun_cli_test(no_subcommand 2 "subcommand" )
dlrun_cli_test(unknown_subcommand 2 "unknown subcommand 'frobnicate' \\(valid: .*config" frobnicate)
dlrun_cli_test(info 0 "torch +[0-9]+\\.[0-9]+" info)
dlrun_cli_test(info_json 0 "\"cuda_sources_compiled\"" info --json)
# The GPU code baked in is what TORCH_CUDA_ARCH_LIST asked of nvcc; a config's device and fused
# path as they would be here.
if(DLRUN_WITH_CUDA)
  string(REPLACE ";" " " _archs "${DLRUN_CUDA_ARCHS}")
  dlrun_cli_test(info_gpu_code 0 "GPU code for: ${_archs}$" info)
else()
  dlrun_cli_test(info_gpu_code 0 "GPU code for: none$" info)
endif()
dlrun_cli_test(info_fused_here 0 "^ +here: fast paths on cpu: conv-BN-ReLU path dlrun \\(model.fused_conv_bn_relu: true\\), amp off, channels_last on, "
               info ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml run.device=cpu model.fused_conv_bn_relu=true)
# Which of the model's blocks the fused operators take, and why not.
dlrun_cli_test(info_model_fuses_regnet 0 "^ +fused conv\\+BN\\+ReLU in regnet_x_400mf: the stem's conv-BN-ReLU and each block's 1x1 and grouped 3x3"
               info ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml model.name=regnet_x_400mf)
dlrun_cli_test(info_model_fuses_nothing 0 "^ +fused conv\\+BN\\+ReLU in efficientnet_b0: nothing: its activation is SiLU"
               info ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml model.name=efficientnet_b0)
dlrun_cli_test(info_cudnn_path_on_cpu 0 "^ +here: fast paths on cpu: conv-BN-ReLU path modules \\(cuDNN's fused BatchNorm-activation needs a CUDA device\\)"
               info ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml run.device=cpu model.fused_conv_bn_relu=cudnn)
dlrun_cli_test(bench_kernels_cudnn_needs_cuda 2 "--path cudnn: cuDNN's fused BatchNorm-activation takes fp16 or bf16 in channels_last on CUDA"
               bench kernels --device cpu --path cudnn)
dlrun_cli_test(bench_kernels_unknown_path 2 "--path triton: expected dlrun or cudnn" bench kernels --device cpu --path triton)
dlrun_cli_test(info_fast_paths_default 0 "^fast paths \\(defaults\\): cudnn_benchmark on, tf32 on, cuda_graphs off, fused_conv_bn_relu auto; .*activation_checkpointing none$" info)
dlrun_cli_test(info_fast_paths_config 0 "^fast paths \\(.*quickstart.yaml\\): cudnn_benchmark off, tf32 off, .*amp bf16, channels_last on, activation_checkpointing blocks$"
               info ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml train.cudnn_benchmark=false train.tf32=false amp.enabled=true
               amp.dtype=bf16 model.channels_last=true model.activation_checkpointing=blocks)
dlrun_cli_test(info_fast_paths_deterministic 0 "^fast paths .*cudnn_benchmark off" info ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml run.deterministic=true)
dlrun_cli_test(config_stages_need_a_resnet 2 "model.activation_checkpointing: convnet has no stages to checkpoint"
               config validate ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml model.activation_checkpointing=stages)
dlrun_cli_test(config_zero_init_residual_needs_a_resnet 2 "model.zero_init_residual: convnet is not of the ResNet family"
               config validate ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml model.zero_init_residual=true)
dlrun_cli_test(config_cuda_graphs_on_cpu 2 "train.cuda_graphs: CUDA graphs need a CUDA device, but run.device is cpu"
               config validate ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml train.cuda_graphs=true run.device=cpu)
dlrun_cli_test(config_show_quickstart 0 "model:.*" config show ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml)
# Showing a config never needs its data (the ImageNet config on a laptop); validate still checks it.
dlrun_cli_test(config_show_without_data 0 "root: /nonexistent/imagenet"
               config show ${CMAKE_SOURCE_DIR}/configs/imagenet/resnet50.yaml data.root=/nonexistent/imagenet)
dlrun_cli_test(config_validate_without_data 2 "data.root: data directory does not exist: /nonexistent/imagenet"
               config validate ${CMAKE_SOURCE_DIR}/configs/imagenet/resnet50.yaml data.root=/nonexistent/imagenet)
dlrun_cli_test(train_force_without_resume_never 2 "--force only applies with --resume never"
               train ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml --force --run-dir /nonexistent/dlrun-force)
dlrun_cli_test(config_validate_quickstart 0 "quickstart.yaml: ok" config validate ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml)
add_test(NAME cli:config_validate_every_shipped
         COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/validate_configs.sh $<TARGET_FILE:dlrun> ${CMAKE_SOURCE_DIR})
set_tests_properties(cli:config_validate_every_shipped PROPERTIES LABELS cli)
dlrun_cli_test(config_validate_unknown_key 2 "bad_key.yaml:4:3: optim.momentom: unknown key$" config validate ${_cfg}/bad_key.yaml)
dlrun_cli_test(config_validate_bad_type 2 "bad_type.yaml:5:11: train.epochs: expected an integer" config validate ${_cfg}/bad_type.yaml)
dlrun_cli_test(config_validate_missing_file 2 "nope.yaml: config file not found" config validate ${_cfg}/nope.yaml)
dlrun_cli_test(config_override_bad 2 "^dlrun: error: command line 'optim.lr=-1': optim.lr: value -1 is out of range \\(must be in \\(0, 1000\\]\\)$" config validate ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml optim.lr=-1)
dlrun_cli_test(config_override_malformed 2 "must be key=value" config show ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml lr)
dlrun_cli_test(config_show_override 0 "lr: 0.05" config show ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml optim.lr=0.05 --no-docs)
dlrun_cli_test(config_missing_arg 2 "config is required" config show)

# dlrun_cli_expect(NAME CODE MATCH regex... [ENV VAR=value...] ARGS dlrun-args...):
# every regex must match a line of the output (for errors with a hint line).
function(dlrun_cli_expect name code)
  cmake_parse_arguments(PARSE_ARGV 2 X "" "" "MATCH;ENV;ARGS")
  add_test(NAME cli:${name} COMMAND ${_expect} ${code} ${X_MATCH} -- $<TARGET_FILE:dlrun> ${X_ARGS})
  set_tests_properties(cli:${name} PROPERTIES LABELS cli)
  if(X_ENV)
    set_tests_properties(cli:${name} PROPERTIES ENVIRONMENT "${X_ENV}")
  endif()
endfunction()

# Usage errors.
dlrun_cli_test(unknown_config_subcommand 2 "unknown subcommand 'frob' \\(valid: show, validate, docs\\)" config frob x.yaml)
dlrun_cli_test(config_no_subcommand 2 "subcommand" config)
dlrun_cli_test(config_validate_missing_arg 2 "config is required" config validate)
dlrun_cli_test(config_validate_directory 2 "data: is a directory" config validate ${_cfg})

# validate: good configs and inheritance.
dlrun_cli_test(config_validate_good 0 "good.yaml: ok$" config validate ${_cfg}/good.yaml)
dlrun_cli_test(config_validate_base_child 0 "child.yaml: ok$" config validate ${_cfg}/nested/child.yaml)
dlrun_cli_test(config_validate_good_override 0 "good.yaml: ok$" config validate ${_cfg}/good.yaml train.epochs=3 data.augment=[])

# validate: each error class, with file:line:col, key and hint.
dlrun_cli_expect(config_validate_unknown_key_hint 2 MATCH "optim.momentom: unknown key" "hint: did you mean 'optim.momentum'\\?"
                 ARGS config validate ${_cfg}/bad_key.yaml)
dlrun_cli_test(config_validate_bad_range 2 "bad_range.yaml:4:13: optim.momentum: value 1.5 is out of range \\(must be in \\[0, 1\\]\\)"
               config validate ${_cfg}/bad_range.yaml)
dlrun_cli_expect(config_validate_bad_enum 2 MATCH "bad_enum.yaml:3:15: optim.name: invalid value 'adam' \\(valid: sgd, adamw, rmsprop, rmsprop_tf, lamb, lars\\)"
                 "hint: did you mean 'adamw'\\?" ARGS config validate ${_cfg}/bad_enum.yaml)
dlrun_cli_test(config_validate_malformed 2 "bad_yaml.yaml:4:6: malformed YAML: end of map flow not found"
               config validate ${_cfg}/bad_yaml.yaml)
dlrun_cli_test(config_validate_duplicate 2 "dup_key.yaml:4:3: model.width: duplicate key \\(first at line 3\\)"
               config validate ${_cfg}/dup_key.yaml)
dlrun_cli_expect(config_validate_missing_required 2 MATCH "missing_required.yaml: model.name: missing required value"
                 "hint: .*one of: mlp, convnet" ARGS config validate ${_cfg}/missing_required.yaml)
dlrun_cli_test(config_validate_cycle 2 "cycle_b.yaml:1:7: base: inheritance cycle: .*cycle_a.yaml -> .*cycle_b.yaml -> .*cycle_a.yaml"
               config validate ${_cfg}/cycle_a.yaml)
dlrun_cli_test(config_validate_missing_base 2 "missing_base.yaml:1:7: base: base file not found: .*no_such_base.yaml"
               config validate ${_cfg}/missing_base.yaml)
# The recipes' settings that cannot run: exit 2 naming the key and what it accepts.
dlrun_cli_test(config_validate_two_policies 2 "data.augment: trivial_augment and auto_augment: one automatic augmentation policy at a time"
               config validate ${_cfg}/good.yaml data.augment=[flip,trivial_augment,auto_augment])
dlrun_cli_test(config_validate_policy_magnitude 2 "data.rand_augment_magnitude: 31 is not a bin of the tables of data.magnitude_bins 31 \\(0 to 30\\)"
               config validate ${_cfg}/good.yaml data.augment=[rand_augment] data.rand_augment_magnitude=31)
dlrun_cli_test(config_validate_policy_name 2 "data.augment\\[0\\]: invalid value 'trivialaugment'.*trivial_augment"
               config validate ${_cfg}/good.yaml data.augment=[trivialaugment])
dlrun_cli_test(config_validate_auto_augment_policy 2 "data.auto_augment_policy: invalid value 'imagenet1k'.*imagenet, cifar10, svhn"
               config validate ${_cfg}/good.yaml data.augment=[auto_augment] data.auto_augment_policy=imagenet1k)
dlrun_cli_test(config_validate_erase_scale 2 "data.erase_scale: expected \\[min, max\\] with 0 < min <= max <= 1"
               config validate ${_cfg}/good.yaml data.erase_scale=[0.5,0.1])
dlrun_cli_test(config_validate_mix_prob 2 "train.mix_prob: .*1"
               config validate ${_cfg}/good.yaml train.mixup_alpha=0.2 train.mix_prob=1.5)
dlrun_cli_test(config_validate_layer_decay 2 "optim.layer_decay: .*1"
               config validate ${_cfg}/good.yaml optim.layer_decay=1.5)
dlrun_cli_test(config_validate_two_policies_augmix 2 "data.augment: augmix and rand_augment: one automatic augmentation policy at a time"
               config validate ${_cfg}/good.yaml data.augment=[augmix,rand_augment])
dlrun_cli_test(config_validate_jitter_hue 2 "data.color_jitter: hue 0.7 is outside \\[0, 0.5\\]"
               config validate ${_cfg}/good.yaml data.augment=[color_jitter] data.color_jitter=[0.4,0.4,0.4,0.7])
dlrun_cli_test(config_validate_jitter_length 2 "data.color_jitter: expected \\[brightness, contrast, saturation, hue\\], got 3 values"
               config validate ${_cfg}/good.yaml data.color_jitter=[0.4,0.4,0.4])
dlrun_cli_test(config_validate_augmix_severity 2 "data.augmix_severity: .*10"
               config validate ${_cfg}/good.yaml data.augment=[augmix] data.augmix_severity=11)
dlrun_cli_test(config_validate_two_clippings 2 "train.clip_grad_value: one clipping at a time"
               config validate ${_cfg}/good.yaml train.clip_grad_value=1 train.clip_grad_norm=1)
dlrun_cli_test(config_validate_eval_resize 2 "data.eval_resize_size: 200 is smaller than the center crop it is cut to \\(224\\)"
               config validate ${_cfg}/good.yaml data.eval_image_size=224 data.eval_resize_size=200)
dlrun_cli_test(config_validate_eval_side 2 "data.eval_image_size: mlp is built for 28x28 images, and the evaluation crops 32x32"
               config validate ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml model.name=mlp data.eval_image_size=32)
dlrun_cli_test(config_validate_repeated_aug 2 "data.repeated_aug: .*1"
               config validate ${_cfg}/good.yaml data.repeated_aug=0)
dlrun_cli_test(config_validate_list_item 2 "bad_list_item.yaml:6:7: data.augment\\[1\\]: invalid value 'rotat'"
               config validate ${_cfg}/bad_list_item.yaml)
dlrun_cli_test(config_validate_cross_field 2 "multistep.yaml: sched.milestones: multistep needs at least one milestone"
               config validate ${_cfg}/multistep.yaml)
dlrun_cli_test(config_validate_override_unknown 2 "command line 'optim.lrr=1': optim.lrr: unknown key"
               config validate ${_cfg}/good.yaml optim.lrr=1)
dlrun_cli_test(config_validate_override_amp_cpu 2 "command line 'amp.dtype=fp16': amp.dtype: fp16 autocast needs a CUDA device"
               config validate ${_cfg}/good.yaml amp.enabled=true amp.dtype=fp16)
dlrun_cli_expect(config_validate_world_size 2 MATCH "good.yaml:4:37: data.batch_size: global batch size 64 is not divisible by world size 3"
                 ENV WORLD_SIZE=3 ARGS config validate ${_cfg}/good.yaml)
dlrun_cli_expect(config_validate_env_unset 2 MATCH "env.yaml:5:8: run.dir: environment variable DLRUN_CLI_TEST_DIR is not set"
                 ENV DLRUN_CLI_TEST_NAME=zed ARGS config validate ${_cfg}/env.yaml)

# show: resolved values, overrides, inheritance, env.
dlrun_cli_expect(config_show_base_child 0 MATCH "^  width: 48$" "^  lr: 0.01$" "^  name: convnet$"
                 ARGS config show --no-docs ${_cfg}/nested/child.yaml)
dlrun_cli_expect(config_show_overrides 0 MATCH "^  augment: \\[flip, crop\\]$" "^  dir: null$" "^  hidden: \\[8, 4\\]$" "^  epochs: 5$"
                 ARGS config show --no-docs ${_cfg}/good.yaml data.augment=[flip,crop] run.dir=null model.hidden=[8,4] train.epochs=5)
dlrun_cli_expect(config_show_override_empty_list 0 MATCH "^  augment: \\[\\]$" ARGS config show --no-docs ${_cfg}/good.yaml data.augment=[])
dlrun_cli_expect(config_show_docs 0 MATCH "^optim: +# optimizer$" "^  lr: 0.001 +# peak learning rate$"
                 ARGS config show ${_cfg}/good.yaml)
dlrun_cli_expect(config_show_env 0 MATCH "^  name: exp-zed$" "^  dir: /tmp/zed$"
                 ENV DLRUN_CLI_TEST_NAME=zed DLRUN_CLI_TEST_DIR=/tmp/zed ARGS config show --no-docs ${_cfg}/env.yaml)

# show's output is a config that reads back to itself.
foreach(_c good.yaml nested/child.yaml)
  string(MAKE_C_IDENTIFIER ${_c} _id)
  add_test(NAME cli:config_show_roundtrip_${_id}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/show_roundtrip.sh $<TARGET_FILE:dlrun> ${_cfg}/${_c} "run.name=a b" run.dir=yes)
  set_tests_properties(cli:config_show_roundtrip_${_id} PROPERTIES LABELS cli)
endforeach()
add_test(NAME cli:config_show_roundtrip_quickstart
         COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/show_roundtrip.sh $<TARGET_FILE:dlrun> ${CMAKE_SOURCE_DIR}/configs/quickstart.yaml)
set_tests_properties(cli:config_show_roundtrip_quickstart PROPERTIES LABELS cli)

# The key reference in docs/configuration.md is generated from the schema and must be current.
add_test(NAME cli:config_docs_current
         COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/config_docs_current.sh $<TARGET_FILE:dlrun> ${CMAKE_SOURCE_DIR}/docs/configuration.md)
set_tests_properties(cli:config_docs_current PROPERTIES LABELS cli)
dlrun_cli_expect(config_docs 0 MATCH "^\\| `train.nonfinite` \\| choice \\| `stop` \\|" ARGS config docs)
# dlrun bench data: the input pipeline alone, on the tiny synthetic set; a bad override is exit 2.
dlrun_cli_test(bench_data 0 "^synthetic, 2 worker thread\\(s\\), batch 32: [0-9]+ images/s \\([0-9]+ per worker\\) over 20 batches"
               bench data ${CMAKE_SOURCE_DIR}/tests/e2e/data/tiny.yaml --batches 20 --warmup 4)
dlrun_cli_test(bench_data_json 0 "\"images_per_s\":[0-9.e+]+.*\"workers\":0"
               bench data ${CMAKE_SOURCE_DIR}/tests/e2e/data/tiny.yaml data.workers=0 --batches 5 --json)
dlrun_cli_test(bench_data_bad_override 2 "data.workers: value -1 is out of range"
               bench data ${CMAKE_SOURCE_DIR}/tests/e2e/data/tiny.yaml data.workers=-1)
# bench data resolves run.device as train does: a device that is not there is refused (it used
# to measure the CPU silently).
dlrun_cli_test(bench_data_missing_device 2 "run.device=cuda:99 but (CUDA is not available|only [0-9]+ CUDA device)"
               bench data ${CMAKE_SOURCE_DIR}/tests/e2e/data/tiny.yaml run.device=cuda:99)
# bench memory and bench ckpt apply train's rules to their flags, and name the flags.
dlrun_cli_expect(bench_memory_stages_need_a_resnet 2 MATCH "--checkpointing: convnet has no stages to checkpoint"
                 "hint: use blocks \\(or none\\)"
                 ARGS bench memory --model convnet --checkpointing stages --device cpu --batch 2 --image-size 32)
# A ViT is built for the --image-size asked (its position embeddings), not refused for it.
dlrun_cli_test(bench_memory_vit_image_size 0 "^vit_b_32 1x3x32x32 on cpu, activation checkpointing blocks, amp off: step peak"
               bench memory --model vit_b_32 --device cpu --batch 1 --image-size 32 --checkpointing blocks)
dlrun_cli_test(bench_memory_fp16_on_cpu 2 "--amp: fp16 autocast needs a CUDA device, but --device is cpu"
               bench memory --model convnet --amp fp16 --device cpu --batch 2 --image-size 32)
dlrun_cli_test(bench_ckpt_missing_device 2 "--device=cuda:99 but (CUDA is not available|only [0-9]+ CUDA device)"
               bench ckpt --model mlp --device cuda:99)
dlrun_cli_test(bench_ckpt_unknown_model 2 "--model: unknown model 'resnet7'" bench ckpt --model resnet7 --device cpu)
# dlrun bench kernels: the fused operators against the unfused sequence on ResNet-50's shapes
# (tiny here: batch 2, 32x32, one round), then resnet50 training both ways; bad flags are exit 2.
set(_bk bench kernels --device cpu --batch 2 --image-size 32 --repeat 3 --iters 1 --e2e-steps 3)
dlrun_cli_test(bench_kernels 0 "^resnet50 training: [0-9.]+ img/s unfused, [0-9.]+ img/s fused \\([0-9.]+x\\??, rounds [0-9.]+-[0-9.]+\\)" ${_bk})
# Fewer than 3 rounds cannot show a spread: refused, naming the flag.
dlrun_cli_test(bench_kernels_too_few_rounds 2 "--repeat: Value 1 not in range 3 to 1000" bench kernels --device cpu --repeat 1)
dlrun_cli_test(bench_kernels_json 0 "\"copy_gb_per_s\":[0-9.e+]+.*\"network_bn_speedup\":[0-9.e+]+.*\"network_bn_speedup_spread\":\\{\"max\":[0-9.e+]+,\"median\":[0-9.e+]+,\"min\":[0-9.e+]+,\"noisy\":(true|false)\\}.*\"units\":\\[\\{\"bn_fused_gb_per_s\""
               ${_bk} --json)
dlrun_cli_test(bench_kernels_bad_dtype 2 "--dtype fp8: expected bf16, fp16 or fp32" ${_bk} --dtype fp8)
dlrun_cli_test(bench_kernels_fp16_cpu 2 "--dtype fp16 needs a CUDA device" ${_bk} --dtype fp16)
# dlrun data: a subcommand is required; a path that is not shards, and a pack without a
# destination, are bad input naming what is wrong; a config naming no shards is refused at its key.
dlrun_cli_test(data_no_subcommand 2 "subcommand" data)
dlrun_cli_test(data_verify_missing 2 "/nonexistent/dlrun-shards is not a directory, a brace pattern" data verify /nonexistent/dlrun-shards)
dlrun_cli_test(data_index_bad_pattern 2 "unbalanced" data index "/tmp/t-{000..002.tar")
dlrun_cli_test(data_pack_needs_to 2 "--to is required" data pack --dataset mnist --root /nonexistent)
dlrun_cli_test(webdataset_needs_shards 2 "data.shards: data.name=webdataset needs data.shards" config validate ${_cfg}/good.yaml data.name=webdataset model.in_channels=3 data.image_size=32)
# predict's config is optional (the checkpoint's config.yaml then): its help does not mark it
# REQUIRED, and without images it says what is missing, not "config is required".
dlrun_cli_test(predict_no_images 2 "no images given: name image files, folders or glob patterns \\(after the experiment YAML, or alone"
               predict --checkpoint /nonexistent)

# `dlrun models`: the zoo with families and torchvision's parameter counts; a pattern; --json.
dlrun_cli_expect(models 0 MATCH "resnext50_32x4d +resnet +torchvision +25\\.0M +224" "wide_resnet101_2 .* 126\\.9M"
                 "convnet +convnet +dlrun" ARGS models)
dlrun_cli_expect(models_pattern 0 MATCH "\"name\": \"resnext101_64x4d\"" "\"parameters\": 83455272" ARGS models "resnext*" --json)
dlrun_cli_expect(models_min_size 0 MATCH "\"min_image_size\": 32" ARGS models convnext_tiny --json)
# An image smaller than the model takes: exit 2 at start-up, before the run directory exists.
dlrun_cli_test(train_image_below_min_size 2 "model.name: convnext_tiny takes images of at least 32x32, and these are 16x16"
               train ${CMAKE_SOURCE_DIR}/tests/e2e/data/tiny.yaml model.name=convnext_tiny)
dlrun_cli_test(train_vit_image_size 2 "model.image_size: vit_b_16 is built for 224x224 images \\(model.image_size: auto, torchvision's\\), and these are 16x16"
               train ${CMAKE_SOURCE_DIR}/tests/e2e/data/tiny.yaml model.name=vit_b_16)
dlrun_cli_test(train_vit_patch_multiple 2 "vit_b_16 takes images whose side is a multiple of its patch, 16: model.image_size is 24"
               train ${CMAKE_SOURCE_DIR}/tests/e2e/data/tiny.yaml model.name=vit_b_16 model.image_size=24 data.synthetic_shape=[1,24,24])
dlrun_cli_expect(models_no_match 2 MATCH "no model name matches 'vit_zz\\*'" ARGS models "vit_zz*")
