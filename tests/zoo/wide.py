"""More zoo architectures than issue 11 names, each picked for what else it exercises
(noted per entry); built like models.ZOO's, and part of it (`make zoo` runs them all,
`make test` builds none of them: its quick subset is of models.CORE).
"""
from __future__ import annotations

from .spec import DECODER, INIT, ZooModel, text, vision

ENCODER = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=128, max_position_embeddings=64)
SEQ2SEQ = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
               max_position_embeddings=64, init_std=INIT, use_cache=False, pad_token_id=1,
               bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
SPEECH = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=128, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2),
              conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
              num_conv_pos_embedding_groups=4, initializer_range=INIT)
WAVE = (1, 800)  # raw audio samples: 39 frames after the conv feature extractor


def _speech(name, config, model, onnx_attention="", **kwargs) -> ZooModel:
    return ZooModel(name, config, model, {**SPEECH, **kwargs}, features=WAVE,
                    onnx_attention=onnx_attention)


WIDE = (
    # encoders over tokens
    text("bert", "BertConfig", "BertModel", **ENCODER),
    text("electra", "ElectraConfig", "ElectraModel", embedding_size=32, **ENCODER),  # projection
    text("mobilebert", "MobileBertConfig", "MobileBertModel",  # bottlenecks, NoNorm
         hidden_size=64, embedding_size=32, intra_bottleneck_size=32, num_hidden_layers=2,
         num_attention_heads=4, intermediate_size=64, true_hidden_size=32,
         num_feedforward_networks=2, max_position_embeddings=64),
    text("xlm_roberta", "XLMRobertaConfig", "XLMRobertaModel", **ENCODER),
    text("deberta", "DebertaConfig", "DebertaModel",  # disentangled relative attention
         relative_attention=True, pos_att_type=["p2c", "c2p"], max_relative_positions=16,
         **ENCODER),
    text("deberta_v2", "DebertaV2Config", "DebertaV2Model",  # log-bucketed positions, gather
         relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"],
         max_relative_positions=16, **ENCODER),
    text("convbert", "ConvBertConfig", "ConvBertModel",  # span-based dynamic convolution
         embedding_size=64, head_ratio=2, conv_kernel_size=5, **ENCODER),
    text("funnel", "FunnelConfig", "FunnelBaseModel",  # pooled sequence, relative attention
         block_sizes=(1, 1), block_repeats=None, d_model=64, n_head=4, d_head=16, d_inner=128),
    text("canine", "CanineConfig", "CanineModel",  # hashed characters, strided conv1d
         hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
         max_position_embeddings=64, downsampling_rate=4, num_hash_functions=2,
         num_hash_buckets=64, local_transformer_stride=8),
    text("squeezebert", "SqueezeBertConfig", "SqueezeBertModel", q_groups=2, k_groups=2,
         v_groups=2, post_attention_groups=2, intermediate_groups=2, output_groups=2,
         embedding_size=64, **ENCODER),  # grouped 1x1 conv1d projections
    text("bigbird", "BigBirdConfig", "BigBirdModel", attention_type="original_full",
         **ENCODER),
    text("xlnet", "XLNetConfig", "XLNetModel", d_model=64, n_layer=2, n_head=4, d_inner=128,
         use_mems_eval=False),  # two-stream relative attention, einsum
    text("yoso", "YosoConfig", "YosoModel", **ENCODER),  # LSH attention bound: acos
    # encoder-decoders (the whole seq2seq forward) and a bare encoder
    text("bart", "BartConfig", "BartModel", **SEQ2SEQ),  # shifts its decoder ids itself
    text("bart_encoder", "BartConfig", "BartEncoder", **SEQ2SEQ),
    text("mbart", "MBartConfig", "MBartModel", **SEQ2SEQ),
    text("marian", "MarianConfig", "MarianModel", decoder_ids=True, **SEQ2SEQ),  # sinusoids
    text("pegasus", "PegasusConfig", "PegasusModel", decoder_ids=True, **SEQ2SEQ),
    text("m2m100", "M2M100Config", "M2M100Model", decoder_ids=True, **SEQ2SEQ),
    text("blenderbot", "BlenderbotConfig", "BlenderbotModel", decoder_ids=True, **SEQ2SEQ),
    text("mt5", "MT5Config", "MT5Model", decoder_ids=True, onnx_attention="eager", d_model=64,
         d_kv=16, d_ff=128, num_layers=2, num_heads=4, use_cache=False,
         decoder_start_token_id=0),
    # decoders over tokens
    text("gpt_neo", "GPTNeoConfig", "GPTNeoModel",  # local (windowed) attention layers
         hidden_size=64, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
         window_size=8, max_position_embeddings=64, intermediate_size=128, use_cache=False),
    text("gptj", "GPTJConfig", "GPTJModel", n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
         n_positions=64, n_inner=128, use_cache=False),  # interleaved rotary, parallel MLP
    text("codegen", "CodeGenConfig", "CodeGenModel", n_embd=64, n_layer=2, n_head=4,
         rotary_dim=8, n_positions=64, n_ctx=64, use_cache=False),
    text("bloom", "BloomConfig", "BloomModel", hidden_size=64, n_layer=2, n_head=4,
         use_cache=False),  # ALiBi position biases
    text("mpt", "MptConfig", "MptModel", d_model=64, n_heads=4, n_layers=2, expansion_ratio=2,
         max_seq_len=64, use_cache=False),  # ALiBi, no biases
    text("gpt_bigcode", "GPTBigCodeConfig", "GPTBigCodeModel", n_embd=64, n_layer=2,
         n_head=4, n_positions=64, use_cache=False),  # multi-query attention
    text("gemma", "GemmaConfig", "GemmaModel", num_key_value_heads=1, head_dim=16,
         **DECODER),  # scaled embeddings, (1 + w) RMSNorm
    text("gemma2", "Gemma2Config", "Gemma2Model", num_key_value_heads=2, head_dim=16,
         sliding_window=8, **DECODER),  # soft-capped logits, sliding window
    text("stablelm", "StableLmConfig", "StableLmModel", num_key_value_heads=2, **DECODER),
    text("starcoder2", "Starcoder2Config", "Starcoder2Model", num_key_value_heads=2,
         sliding_window=8, **DECODER),
    text("qwen3", "Qwen3Config", "Qwen3Model", num_key_value_heads=2, head_dim=16,
         **DECODER),  # q/k norms
    text("olmo", "OlmoConfig", "OlmoModel", num_key_value_heads=2, **DECODER),  # no-affine LN
    text("phi3", "Phi3Config", "Phi3Model", num_key_value_heads=2, pad_token_id=1,
         **DECODER),  # fused qkv; rotary over the whole head (an empty pass-through slice)
    text("olmo2", "Olmo2Config", "Olmo2Model", num_key_value_heads=2, **DECODER),
    text("gemma3_text", "Gemma3TextConfig", "Gemma3TextModel", num_key_value_heads=2,
         head_dim=16, sliding_window=8, **DECODER),  # local and global rotary bases
    text("gpt_neox", "GPTNeoXConfig", "GPTNeoXModel", rotary_pct=0.5, **DECODER),
    text("falcon", "FalconConfig", "FalconModel", hidden_size=64, num_hidden_layers=2,
         num_attention_heads=4, num_kv_heads=1, new_decoder_architecture=False,
         multi_query=True, alibi=False, max_position_embeddings=64,
         use_cache=False),  # multi-query sdpa: k/v heads broadcast
    text("modernbert", "ModernBertConfig", "ModernBertModel", hidden_size=64,
         num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
         max_position_embeddings=64, local_attention=8, global_attn_every_n_layers=2,
         pad_token_id=1, bos_token_id=0, eos_token_id=2, sep_token_id=3,
         cls_token_id=0),  # sliding-window encoder, GeGLU
    # mixtures of experts, run as batched matmuls of per-token gathered expert weights
    # (transformers' default grouped_mm path, histc and a custom op of its own, is checked
    # by the *_defaults entries of defaults.py)
    text("mixtral", "MixtralConfig", "MixtralModel", num_key_value_heads=2,
         num_local_experts=4, num_experts_per_tok=2, experts_implementation="batched_mm",
         **DECODER),
    text("qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeModel", num_key_value_heads=2, num_experts=4,
         num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64,
         experts_implementation="batched_mm", **DECODER),  # plus a gated shared expert
    # state-space models
    text("mamba", "MambaConfig", "MambaModel", hidden_size=32, state_size=8,
         num_hidden_layers=2, expand=2, conv_kernel=4, use_cache=False),  # selective scan
    text("mamba2", "Mamba2Config", "Mamba2Model", hidden_size=64, state_size=16,
         num_hidden_layers=2, expand=2, conv_kernel=4, head_dim=16, num_heads=8, n_groups=1,
         chunk_size=8, use_cache=False),  # chunked scan (segment sums), gated RMSNorm
    text("falcon_mamba", "FalconMambaConfig", "FalconMambaModel", hidden_size=32,
         state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4, use_cache=False),
    # speech: conv feature extractors over raw audio, then a transformer
    _speech("wav2vec2", "Wav2Vec2Config", "Wav2Vec2Model",  # group norm, grouped pos. conv
            feat_extract_norm="group", do_stable_layer_norm=False),
    _speech("hubert", "HubertConfig", "HubertModel", feat_extract_norm="layer",
            do_stable_layer_norm=True),
    _speech("wav2vec2_conformer", "Wav2Vec2ConformerConfig", "Wav2Vec2ConformerModel",
            position_embeddings_type="rotary", conv_depthwise_kernel_size=7),
    _speech("wav2vec2_conformer_rel", "Wav2Vec2ConformerConfig", "Wav2Vec2ConformerModel",
            onnx_attention="eager", position_embeddings_type="relative",
            conv_depthwise_kernel_size=7),
    _speech("data2vec_audio", "Data2VecAudioConfig", "Data2VecAudioModel",
            conv_pos_kernel_size=5, num_conv_pos_embeddings=5),
    _speech("wavlm", "WavLMConfig", "WavLMModel", num_buckets=32,  # gated relative bias
            max_bucket_distance=64),
    _speech("sew_d", "SEWDConfig", "SEWDModel", squeeze_factor=2, position_buckets=16,
            max_relative_positions=32),  # squeezed sequence, DeBERTa attention
    ZooModel("speech2text", "Speech2TextConfig", "Speech2TextEncoder",  # conv1d + GLU
             dict(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
                  decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128,
                  input_feat_per_channel=16, input_channels=1, conv_channels=32,
                  max_source_positions=64, init_std=INIT, vocab_size=128),
             features=(1, 32, 16)),
    # video: 5-D inputs (batch, frames, channels, height, width)
    ZooModel("videomae", "VideoMAEConfig", "VideoMAEModel",  # conv3d tubelets
             dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, image_size=32, patch_size=8, num_frames=4,
                  tubelet_size=2, initializer_range=INIT), features=(1, 4, 3, 32, 32)),
    ZooModel("timesformer", "TimesformerConfig", "TimesformerModel",  # divided attention
             dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, image_size=32, patch_size=8, num_frames=4,
                  initializer_range=INIT), features=(1, 4, 3, 32, 32)),
    # audio codec: conv1d encoder, vector quantizer, transposed-conv decoder
    ZooModel("dac", "DacConfig", "DacModel",
             dict(encoder_hidden_size=8, downsampling_ratios=(2, 4), decoder_hidden_size=32,
                  n_codebooks=2, codebook_size=64, codebook_dim=4, hidden_size=32,
                  upsampling_ratios=(4, 2)), features=(1, 1, 256), output="audio_values"),
    # vision transformers
    vision("vitdet", "VitDetConfig", "VitDetModel", hidden_size=64, num_hidden_layers=2,
           num_attention_heads=4, mlp_ratio=2, image_size=32, pretrain_image_size=32,
           patch_size=4, window_size=4, window_block_indices=(0,),  # windowed, rel. pos.
           use_relative_position_embeddings=True, initializer_range=INIT),
    vision("hiera", "HieraConfig", "HieraModel", image=64, image_size=(64, 64),
           embed_dim=16, num_heads=(1, 2), depths=(1, 1), patch_stride=(4, 4),
           masked_unit_size=(4, 4), query_stride=(2, 2), num_query_pool=1,  # unrolled
           initializer_range=INIT),
    vision("cvt", "CvtConfig", "CvtModel", image=64, embed_dim=(16, 32, 48),
           num_heads=(1, 2, 2), depth=(1, 2, 3)),  # conv projections of q/k/v
    vision("beit", "BeitConfig", "BeitModel", onnx_attention="eager",  # relative pos. bias
           hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
           image_size=32, patch_size=4, use_relative_position_bias=True,
           initializer_range=INIT),
    vision("data2vec_vision", "Data2VecVisionConfig", "Data2VecVisionModel",
           onnx_attention="eager", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
           intermediate_size=128, image_size=32, patch_size=4, use_relative_position_bias=True,
           initializer_range=INIT),
    vision("dinov2", "Dinov2Config", "Dinov2Model", hidden_size=64, num_hidden_layers=2,
           num_attention_heads=4, mlp_ratio=2, image_size=32, patch_size=4,
           initializer_range=INIT),  # layer scale, interpolated position embeddings
    vision("siglip_vision", "SiglipVisionConfig", "SiglipVisionModel", hidden_size=64,
           intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, image_size=32,
           patch_size=4),  # attention-pooling head
    vision("yolos", "YolosConfig", "YolosModel", hidden_size=64,  # detection tokens
           num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
           image_size=(32, 32), patch_size=4, num_detection_tokens=4, initializer_range=INIT),
    vision("swinv2", "Swinv2Config", "Swinv2Model", image_size=32, patch_size=2, embed_dim=32,
           depths=(2, 2), num_heads=(2, 4), window_size=4,  # cosine attention, log-CPB MLP
           initializer_range=INIT),
    vision("pvt", "PvtConfig", "PvtModel", image=64, image_size=64,  # spatial reduction
           hidden_sizes=(16, 32, 48, 64), depths=(1, 1, 1, 1),
           num_attention_heads=(1, 1, 2, 2), initializer_range=INIT),
    vision("pvt_v2", "PvtV2Config", "PvtV2Model", image=64, image_size=64,
           hidden_sizes=(16, 32, 48, 64), depths=(1, 1, 1, 1),
           num_attention_heads=(1, 1, 2, 2), initializer_range=INIT),
    vision("levit", "LevitConfig", "LevitModel", image=64, image_size=64,  # attention bias
           hidden_sizes=(32, 48, 64), num_attention_heads=(1, 2, 2), depths=(1, 1, 1),
           key_dim=(8, 8, 8), mlp_ratio=(2, 2, 2), attention_ratio=(2, 2, 2)),
    vision("mobilevitv2", "MobileViTV2Config", "MobileViTV2Model", image=64, image_size=64,
           width_multiplier=0.25, initializer_range=INIT),  # separable linear attention
    vision("swiftformer", "SwiftFormerConfig", "SwiftFormerModel", image=64, image_size=64,
           depths=(1, 1, 1, 1), embed_dims=(16, 32, 48, 64)),  # additive attention
    # depth estimation: decoders that resize
    vision("dpt", "DPTConfig", "DPTForDepthEstimation", output="predicted_depth",
           hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
           image_size=32, patch_size=4, backbone_out_indices=(0, 1, 2, 3),
           neck_hidden_sizes=(16, 32, 48, 64), fusion_hidden_size=32, head_hidden_size=16,
           initializer_range=INIT),  # reassemble (conv transpose), bilinear fusion
    vision("glpn", "GLPNConfig", "GLPNForDepthEstimation", image=64, output="predicted_depth",
           num_encoder_blocks=2, depths=(1, 1), sr_ratios=(2, 1), hidden_sizes=(32, 64),
           patch_sizes=(7, 3), strides=(4, 2), num_attention_heads=(1, 2), mlp_ratios=(2, 2),
           decoder_hidden_size=32, initializer_range=INIT),
    vision("sam_vision", "SamVisionConfig", "SamVisionModel", image=32,
           onnx_attention="eager", hidden_size=64, output_channels=32, num_hidden_layers=2,
           num_attention_heads=4, image_size=32, patch_size=4, window_size=2,
           global_attn_indexes=(1,), mlp_dim=128),  # windowed + global, decomposed rel. pos.
    vision("swin2sr", "Swin2SRConfig", "Swin2SRForImageSuperResolution", image=16,
           output="reconstruction", image_size=16, patch_size=1, embed_dim=16,
           depths=(1, 1), num_heads=(2, 2), window_size=4, upscale=2,
           upsampler="pixelshuffle"),  # super-resolution: pixel shuffle
    # CNNs and conv/attention hybrids
    vision("bit", "BitConfig", "BitModel", image=64, embedding_size=32,
           hidden_sizes=(32, 64, 128, 256), depths=(1, 1, 1, 1), layer_type="preactivation",
           num_groups=8),  # weight-standardized convs, group norm
    vision("convnextv2", "ConvNextV2Config", "ConvNextV2Model", image=64,
           hidden_sizes=(32, 64), depths=(1, 1), num_stages=2),  # global response norm
    vision("poolformer", "PoolFormerConfig", "PoolFormerModel", image=64,  # avg-pool mixer
           hidden_sizes=(16, 32, 48, 64), depths=(1, 1, 1, 1)),
    vision("mobilenet_v1", "MobileNetV1Config", "MobileNetV1Model", image=64, image_size=64,
           depth_multiplier=0.25),  # TF "SAME" padding, relu6
    vision("focalnet", "FocalNetConfig", "FocalNetModel", image=64, image_size=64,
           embed_dim=16, depths=(1, 1), focal_levels=(2, 2), focal_windows=(3, 3)),
)
