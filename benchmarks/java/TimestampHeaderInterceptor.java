package coordinatoraudit.bench;

import java.nio.ByteBuffer;
import java.util.Map;

import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;

/**
 * Gives a record the timestamp carried in its header {@value #HEADER} (8 bytes, big-endian epoch
 * milliseconds) and sends it without headers. Spark's Kafka sink writes key, value, partition and
 * headers but no timestamp; the benchmark loads records with their original timestamps through it.
 */
public final class TimestampHeaderInterceptor implements ProducerInterceptor<byte[], byte[]> {
    public static final String HEADER = "coordinator-audit-timestamp";

    @Override
    public ProducerRecord<byte[], byte[]> onSend(ProducerRecord<byte[], byte[]> record) {
        Header header = record.headers().lastHeader(HEADER);
        if (header == null || header.value() == null || header.value().length != Long.BYTES) {
            throw new IllegalArgumentException("record without an 8-byte " + HEADER + " header (partition "
                    + record.partition() + ")");
        }
        long timestamp = ByteBuffer.wrap(header.value()).getLong();
        return new ProducerRecord<>(record.topic(), record.partition(), timestamp, record.key(), record.value());
    }

    @Override
    public void onAcknowledgement(RecordMetadata metadata, Exception exception) {
    }

    @Override
    public void close() {
    }

    @Override
    public void configure(Map<String, ?> configs) {
    }
}
