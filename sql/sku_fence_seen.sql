SELECT fence_token FROM skus WHERE id = $1
