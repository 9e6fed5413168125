"""A count, not a measurement: the L1 and shared-memory work of one chunk of the single wgmma block's
NCHW patch loads (16 channels x 32 tiles, one 4 x 4 float32 patch per thread, patches at odd columns
as padding 1 puts them), for loader lane maps other than the kernel's, with and without warp shuffles.

Per warp load instruction it counts the distinct 128-byte lines (an L1 wavefront each) and 32-byte
sectors its lanes touch; per warp V store, the shared-memory wavefronts its bank conflicts cost (V's
words as WinogradWgmmaTile::v_word lays them out). With shuffles a lane loads its patch row's middle
pair only and takes values 0 and 3 from the lanes of the neighbouring tiles; the lanes whose
neighbour is in another warp or another tile row load them, in one instruction per row. A load
whose lanes all fall in the padding touches no line and is not counted.

usage: python benchmarks/micro/patch_load_model.py
"""

V_QUAD = 32 * 4 + 8  # WinogradWgmmaTile::kVQuad


def v_word(ch, tile):
    return (ch // 4) * V_QUAD + (tile // 8) * 32 + (tile % 8) * 4 + ch % 4


LANE_MAPS = {
    # (warp, lane) -> (channel, tile) of a chunk
    "4 channels x 8 tiles (the kernel's)": lambda w, l: ((w % 4) * 4 + l % 4, (w // 4) * 8 + l // 4),
    "2 channels x 16 tiles": lambda w, l: ((w % 8) * 2 + l % 2, (w // 8) * 16 + l // 2),
    "1 channel x 32 tiles": lambda w, l: (w, l),
}


def chunk_counts(lane_map, width, height, first_tile, shuffles):
    tiles_w = (width + 1) // 2
    plane = width * height
    loads = lines = sectors = shuffle_count = store_wavefronts = 0
    for warp in range(16):
        lanes = [lane_map(warp, lane) for lane in range(32)]
        for row in range(4):
            kinds = [[1, 2], "edges"] if shuffles else [[0], [1, 2], [3]]
            for cols in kinds:
                addresses = []
                for ch, tile in lanes:
                    ty, tx = divmod(first_tile + tile, tiles_w)
                    if cols == "edges":
                        take = []
                        for col, step in ((0, -1), (3, 1)):
                            same_row = divmod(first_tile + tile + step, tiles_w)[0] == ty
                            if (ch, tile + step) not in lanes or not same_row:
                                take.append(col)
                    else:
                        take = cols
                    iy = 2 * ty - 1 + row
                    for col in take:
                        ix = 2 * tx - 1 + col
                        if 0 <= iy < height and 0 <= ix < width:
                            addresses.append((ch * plane + iy * width + ix) * 4)
                if not addresses:
                    continue
                loads += 1
                lines += len({a // 128 for a in addresses})
                sectors += len({a // 32 for a in addresses})
            if shuffles:
                shuffle_count += 2
        banks = {}
        for ch, tile in lanes:
            banks.setdefault(v_word(ch, tile) % 32, set()).add(v_word(ch, tile))
        store_wavefronts += 16 * max(len(words) for words in banks.values())
    return loads, lines, sectors, shuffle_count, store_wavefronts


def main():
    print("| layer (W = H) | tiles from | lane map | shuffles | load instructions | L1 lines | sectors | "
          "shuffles | V-store wavefronts | lines + shuffles + stores |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for layer, hw, first_tile in (("Y2", 272, 0), ("Y8", 68, 0), ("Y8", 68, 20), ("R2", 56, 0)):
        for name, lane_map in LANE_MAPS.items():
            for shuffles in (False, True):
                loads, lines, sectors, shfl, stores = chunk_counts(lane_map, hw, hw, first_tile, shuffles)
                print(f"| {layer} ({hw}) | {first_tile} | {name} | {'yes' if shuffles else 'no'} | {loads} | "
                      f"{lines} | {sectors} | {shfl} | {stores} | {lines + shfl + stores} |")


if __name__ == "__main__":
    main()
