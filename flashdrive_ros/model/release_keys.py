"""The key names of release config.json files: what maps, what is checked against the
tokenizer, and what only serves training or runtime (ignored)."""

from __future__ import annotations

import dataclasses

from flashdrive_ros.model.config import ExpertConfig

OWN_SECTION = "flashdrive"
TOKEN_ID_KEYS = frozenset({"traj_token_start_idx", "traj_token_ids", "add_special_tokens",
                           "image_token_id", "video_token_id", "vision_start_token_id",
                           "vision_end_token_id"})
HF_GENERIC_KEYS = frozenset({
    "transformers_version", "_name_or_path", "architectures", "model_type", "dtype",
    "torch_dtype", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id",
    "sep_token_id", "decoder_start_token_id", "initializer_range", "auto_map",
    "_attn_implementation", "attn_implementation", "_attn_implementation_autoset",
    "attention_dropout", "return_dict", "output_hidden_states", "output_attentions",
    "torchscript", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder",
    "add_cross_attention", "cross_attention_hidden_size", "tie_encoder_decoder",
    "id2label", "label2id", "problem_type", "num_labels", "tokenizer_class", "prefix",
    "task_specific_params", "finetuning_task", "pruned_heads", "tf_legacy_loss",
    "use_bfloat16", "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
    "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
    "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens"})
RUNTIME_ONLY_KEYS = frozenset({"model_dtype", "keep_same_dtype", "min_pixels", "max_pixels",
                               "include_camera_ids", "include_frame_nums"})
TOP_MAPPED = frozenset({
    "architectures", "vlm_name_or_path", "vlm_backend", "text_config", "vision_config",
    "vocab_size", "tie_word_embeddings", "traj_vocab_size", "tokens_per_history_traj",
    "tokens_per_future_traj", "expert_cfg", "action_space_cfg", "action_in_proj_cfg",
    "action_out_proj_cfg", "diffusion_cfg", "traj_tokenizer_cfg", "hist_traj_tokenizer_cfg",
    "expert_non_causal_attention", OWN_SECTION})
TEXT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "intermediate_size", "hidden_act",
               "rms_norm_eps", "max_position_embeddings")
TEXT_OTHER = frozenset({"rope_theta", "rope_scaling", "rope_parameters", "tie_word_embeddings",
                        "attention_bias"})
VISION_FIELDS = ("depth", "hidden_size", "num_heads", "intermediate_size", "hidden_act",
                 "in_channels", "patch_size", "temporal_patch_size", "spatial_merge_size",
                 "out_hidden_size", "num_position_embeddings", "deepstack_visual_indexes")
EXPERT_FIELDS = tuple(f.name for f in dataclasses.fields(ExpertConfig))
SPACE_FIELDS = {"n_waypoints": "num_waypoints", "dt": "dt", "accel_mean": "accel_mean",
                "accel_std": "accel_std", "curvature_mean": "curvature_mean",
                "curvature_std": "curvature_std"}
SPACE_UNUSED = frozenset({"accel_bounds", "curvature_bounds", "theta_lambda", "theta_ridge",
                          "v_lambda", "v_ridge", "a_lambda", "a_ridge", "kappa_lambda",
                          "kappa_ridge"})
IN_PROJ_FIELDS = {"num_fourier_feats": "num_fourier_features", "hidden_size":
                  "in_proj_hidden_size", "num_enc_layers": "in_proj_num_layers",
                  "max_freq": "fourier_max_freq"}
