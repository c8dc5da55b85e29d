vcl 4.1;
# Varnish peer for edgebench, rendered into the peer's run dir. Started as
#   varnishd -F -a 127.0.0.1:{{port}} -f <this file> -s malloc,256m -n <dir>/varnish -p thread_pools=1
# (storage and thread parameters are experiment vars: storage, thread_pools, params).

backend origin {
    .host = "{{origin_host}}";
    .port = "{{origin_port}}";
}

sub vcl_backend_response {
    # Same lifetime as nginx's `proxy_cache_valid 200 10m`.
    if (beresp.status == 200) {
        set beresp.ttl = 10m;
    }
    {{backend_response_extra|}}
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache-Status = "HIT";
    } else {
        set resp.http.X-Cache-Status = "MISS";
    }
    {{deliver_extra|}}
}
